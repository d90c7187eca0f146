"""Whether a simulated service runs its per-request passes compiled, and the hand-over to them: its
instances' queues and its rate-limit tokens as arrays to `testbed.sim.compiled` and back."""

from __future__ import annotations

import os
from functools import cache
from types import ModuleType

import numpy as np

from testbed.profiles import ServiceProfile
from testbed.sim.kernel_args import Carried, Frame, Held, Rules, Served, Slots, SubChunk

# "0": the numpy kernels even where numba imports; "1": the compiled ones from the first request;
# unset: the compiled ones once the process has simulated COMPILED_AFTER_S (loading numba's cache
# costs ~0.5 s, which a day's simulation, ~0.04 s on either path, never earns back)
COMPILED_ENV = "TESTBED_SIM_COMPILED"
COMPILED_AFTER_S = 3_000_000.0  # simulated seconds (~35 days) before the compiled passes pay
_simulated_s = [0.0]  # this process's simulated seconds so far (SimService notes its arrivals' span)
_NO_TOKENS = (-(2**62), 0)  # a rate-limit window no arrival is in, and nothing taken in it


@cache
def _compiled_module() -> ModuleType | None:
    try:
        # numba takes ~0.3 s to import and is optional (the `fast` extra): only a simulation loads it
        from testbed.sim import compiled
    except ImportError:
        return None
    return compiled


def note_simulated(seconds: float) -> None:
    """Count `seconds` of simulated time towards COMPILED_AFTER_S (a service's arrivals' span)."""
    _simulated_s[0] += max(0.0, seconds)


def compiled_kernels() -> ModuleType | None:
    """`testbed.sim.compiled` (the per-request passes compiled by numba, equal to the numpy ones to
    the bit) when numba is installed and TESTBED_SIM_COMPILED is "1", or unset once this process
    has simulated COMPILED_AFTER_S; else None (the numpy passes)."""
    mode = os.environ.get(COMPILED_ENV)
    if mode == "0" or (mode != "1" and _simulated_s[0] < COMPILED_AFTER_S):
        return None
    return _compiled_module()


def compiled_passes(profile: ServiceProfile, exact: bool,
                    arrivals: np.ndarray | None = None) -> CompiledPasses | None:
    """The compiled passes for a service, where they stand for its numpy kernels: one request at a
    time per instance (`queueing.serve_fast`'s case), not the exact reference walk, numba there
    (`compiled_kernels`); `arrivals`' span counts as simulated time first."""
    if arrivals is not None and len(arrivals):
        note_simulated(float(arrivals[-1]))
    kernels = None if exact or profile.capacity != 1 else compiled_kernels()
    return None if kernels is None else CompiledPasses(kernels, profile)


class CompiledPasses:
    """A service's chunk through `compiled.serve_round_robin` and `compiled.count_chunk`."""

    def __init__(self, kernels: ModuleType, profile: ServiceProfile):
        self.kernels = kernels
        rate = profile.rate_limit
        self.rate_limit, self.rate_window = (0, 1.0) if rate is None else (int(rate[0]), float(rate[1]))
        self.queue = 1 + profile.queue_limit  # requests an instance holds
        self.slo = profile.slo_ms / 1000.0 + 1e-6

    def serve(self, pending: list[list[float]], a, s, targets: list[int], rr: int,
              tokens: dict[int, tuple[int, int]], finish: np.ndarray, owner: np.ndarray) -> None:
        """One sub-chunk, as `SimService._serve_numpy` serves it: `pending` (the finish times of
        each of `targets`) and `tokens` (instance -> its latest rate-limit window and count) are
        updated; `finish` (NaN-filled) and `owner` are written."""
        m = len(targets)
        prior = [tokens.get(targets[(rr + col) % m], _NO_TOKENS) for col in range(m)]
        width = max(1, max(map(len, pending)))
        kn = self.kernels
        slots = Slots(np.array(targets), np.array([w for w, _ in prior]),
                        np.array([c for _, c in prior]),
                        np.array([p + [0.0] * (width - len(p)) for p in pending]),
                        np.array([len(p) for p in pending]))
        new, new_len, changed, window, count, seen = kn.serve_round_robin(
            SubChunk(a, s, finish, owner), slots,
            Rules(rr, self.rate_limit, self.rate_window, self.queue))
        for k in range(m):
            if changed[k]:
                pending[k] = new[k, : new_len[k]].tolist()
        if self.rate_limit:
            columns = zip(window.tolist(), count.tolist(), seen.tolist(), strict=True)
            for col, (w, c, hit) in enumerate(columns):
                if hit:
                    tokens[targets[(rr + col) % m]] = (w, c)

    def count(self, a, finish, owner, *, t0: float, step: float, steps: int, start_pending,
              done: tuple[np.ndarray, np.ndarray], completion: bool, sample_origin: float,
              counted: list[bool]) -> tuple:
        """A chunk's per-window columns (arrivals, served, dropped, slow, summed latency), its busy
        samples (summed over the `counted` instances, or one row per instance when that is empty)
        and the served requests left for a later chunk (finish, latency)."""
        held = [(k, f) for k, p in enumerate(start_pending) for f in p]
        kn = self.kernels
        arrivals, dropped, served, slow, proc_sum, busy, left_finish, left_latency = kn.count_chunk(
            Served(a, finish, owner), Carried(done[0], done[1]),
            Held(np.array([i for i, _ in held], dtype=np.int64), np.array([f for _, f in held]),
                   np.array(counted, dtype=np.bool_)),
            Frame(t0, step, steps, self.slo, completion, sample_origin, steps * round(step),
                     len(start_pending)))
        return (arrivals, served, dropped, slow, proc_sum), busy, (left_finish, left_latency)
