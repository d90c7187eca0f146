"""The compiled passes (testbed/sim/compiled.py, numba) equal the numpy kernels to the bit: one
sub-chunk served both ways, and whole services stepped and scaled both ways."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.load.trace import Trace, arrival_times
from testbed.profiles import ServiceProfile, default_profiles
from testbed.sim.chunk import SubChunk
from testbed.sim.passes import COMPILED_ENV, compiled_kernels
from testbed.sim.service import SimService
from testbed.sim.service_options import WindowReading

pytest.importorskip("numba", reason="the simulator's compiled passes need the fast extra (numba)")

PROFILES = default_profiles()


def _service(profile: ServiceProfile, monkeypatch, compiled: bool, arrivals=None, **options) -> SimService:
    monkeypatch.setenv(COMPILED_ENV, "1" if compiled else "0")
    arrivals = np.array([0.0]) if arrivals is None else arrivals
    svc = SimService(profile, arrivals, np.random.default_rng(0), **options)
    assert (svc._passes is not None) == compiled
    return svc


def _bits(x: np.ndarray) -> bytes:
    return np.ascontiguousarray(x, dtype=np.float64).tobytes()


@pytest.mark.parametrize("seed", range(40))
def test_a_sub_chunk_is_served_as_the_numpy_kernels_serve_it(seed, monkeypatch):
    """Random sub-chunks (1-5 instances, a pointer past the count, queues that fill, rate limits
    with tokens taken earlier, held requests beyond the queue's length): finish times, owners,
    queues and tokens equal to the bit."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 6))
    n = int(rng.integers(0, 600))
    queue_limit = int(rng.integers(0, 5))
    rate = None if seed % 4 == 0 else (int(rng.integers(1, 8)), float(rng.choice([0.5, 1.0, 2.0])))
    profile = PROFILES["chatbot"].replace(queue_limit=queue_limit, rate_limit=rate)
    a = np.sort(rng.integers(0, 60_000, n)) / 1000.0 + 100.0
    s = rng.integers(50, 900, n) / 1000.0 * m
    targets = sorted(rng.choice(7, m, replace=False).tolist())
    rr = int(rng.integers(0, 2 * m))
    held = {k: sorted((100.0 + rng.integers(0, 3000, int(rng.integers(0, queue_limit + 3))) / 1000).tolist())
            for k in targets}
    tokens = {}  # taken in the first arrival's rate-limit window, as an earlier sub-chunk leaves them
    if rate and n:
        first_window = int(np.floor(a[0] / rate[1] + 1e-9))
        tokens = {k: (first_window, int(rng.integers(0, rate[0] + 1))) for k in targets[::2]}

    numpy_pending = [list(held[k]) for k in targets]
    numpy_tokens = dict(tokens)
    finish, owner = _service(profile, monkeypatch, compiled=False)._serve_numpy(
        a, s, SubChunk(0, n, targets, rr, numpy_tokens, numpy_pending),
        finish=np.full(n, np.nan), owner=np.full(n, -1, dtype=np.int64))

    passes = _service(profile, monkeypatch, compiled=True)._passes
    c_pending = [list(held[k]) for k in targets]
    c_finish, c_owner = np.full(n, np.nan), np.full(n, -1, dtype=np.int64)
    c_tokens = dict(tokens)
    passes.serve(c_pending, a, s, targets, rr, c_tokens, c_finish, c_owner)

    assert _bits(c_finish) == _bits(finish)
    assert c_owner.tolist() == owner.tolist()
    assert c_pending == numpy_pending
    assert c_tokens == numpy_tokens
    if seed == 1:  # the comparison sees one ulp
        assert np.isnan(finish).sum() < n
        nudged = finish.copy()
        i = int(np.flatnonzero(~np.isnan(finish))[0])
        nudged[i] = np.nextafter(nudged[i], np.inf)
        assert _bits(nudged) != _bits(finish)


def _step_and_scale(profile, monkeypatch, compiled: bool, seed: int, **options):
    rng = np.random.default_rng(seed)
    steps = 240
    per_instance = 2000.0 / sum(profile.proc_time_ms)  # requests/s one instance serves
    load = 2.0 + 1.5 * np.sin(np.arange(steps * 30) / 700.0) + rng.uniform(0, 1, steps * 30)
    rate = per_instance * load  # 0.5-4.5 instances' worth: queues fill while the count is low
    arrivals = arrival_times(Trace("wave", np.ones(steps * 30), rate), 1.0)
    svc = _service(profile, monkeypatch, compiled, arrivals, **options)
    scale_rng = np.random.default_rng(seed + 1)  # the same actions on both paths
    out, t = [], 0.0
    for _ in range(steps):
        outcome = svc.advance(t, t + 30.0)
        out.append(repr(outcome))
        t += 30.0
        if scale_rng.random() < 0.15:
            svc.scale(int(scale_rng.integers(1, 5)), t)
    out.append(repr([(i.ready_at, i.pending, i.removed_at) for i in svc.instances]))
    return out


@pytest.mark.parametrize("service", ["chatbot", "imgcls", "tts"])
@pytest.mark.parametrize("options", [
    {},
    {"reading": WindowReading(util_counts_starting=False)},
    {"reading": WindowReading(slo_counting="arrival", util_sample_phase=0.5)},
    {"max_chunk_steps": 1},
])
def test_a_service_stepped_and_scaled_is_the_same_on_both_paths(service, options, monkeypatch):
    """Every period's outcome (repr: every float to the bit) and the instances left at the end,
    with scale-ups and drains at random periods, under the simulator's options."""
    profile = PROFILES[service].replace(queue_limit=4)  # queues that fill: the drop walks run
    compiled = _step_and_scale(profile, monkeypatch, True, 3, **options)
    numpy = _step_and_scale(profile, monkeypatch, False, 3, **options)
    assert compiled == numpy
    assert any("dropped=0" not in line for line in compiled[:-1])


def test_the_compiled_path_is_taken_where_it_pays(monkeypatch):
    """Unset, the numpy passes until the process has simulated COMPILED_AFTER_S (a day never
    earns back numba's load), then the compiled ones; "1" from the start, "0" never."""
    from testbed.sim import passes

    monkeypatch.delenv(COMPILED_ENV, raising=False)
    monkeypatch.setattr(passes, "_simulated_s", [0.0])
    day = np.arange(0.0, 86_400.0, 0.5)
    assert SimService(PROFILES["chatbot"], day, np.random.default_rng(0))._passes is None
    assert passes._simulated_s[0] == day[-1]  # the day's span was counted
    passes.note_simulated(passes.COMPILED_AFTER_S)
    assert compiled_kernels() is not None
    assert SimService(PROFILES["chatbot"], day, np.random.default_rng(0))._passes is not None
    monkeypatch.setattr(passes, "_simulated_s", [0.0])
    assert _service(PROFILES["chatbot"], monkeypatch, compiled=True)._passes is not None
    monkeypatch.setenv(COMPILED_ENV, "0")
    assert compiled_kernels() is None
    monkeypatch.setenv(COMPILED_ENV, "1")
    # the numpy path only: several requests at once per instance, the exact reference walk
    chatbot = PROFILES["chatbot"]
    for profile, kw in ((chatbot.replace(capacity=2), {}), (chatbot, {"exact": True})):
        assert SimService(profile, np.array([0.0]), np.random.default_rng(0), **kw)._passes is None
