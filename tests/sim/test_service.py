"""The simulator against closed-form cases, the exact reference kernel, and itself under a seed."""


import numpy as np
import pytest

from testbed.errors import StateError
from testbed.load.trace import Trace, arrival_times
from testbed.profiles import ServiceProfile, default_profiles
from testbed.scaler.loop import ScalerLoop
from testbed.sim.cluster import SimCluster, SimOptions
from testbed.sim.queueing import serve_exact, serve_fast
from testbed.sim.service import SimService, rate_limit_admit, round_robin_admit
from testbed.sim.service_options import WindowReading

PROFILES = default_profiles()


def profile(
    proc_ms: float, *, queue: int = 3, startup_ms: float = 13000, slo_ms: float = 1000, capacity: int = 1
) -> ServiceProfile:
    return ServiceProfile(name="svc", capacity=capacity, proc_time_ms=(proc_ms, proc_ms), slo_ms=slo_ms,
                          startup_ms=startup_ms, queue_limit=queue)


def cluster(prof: ServiceProfile, rate: float, seconds: int = 300, units: int = 8, **kw) -> SimCluster:
    return SimCluster(
        {"svc": prof}, {"svc": Trace.constant(rate, seconds)}, {"svc": 1.0}, total_units=units, **kw
    )


def test_one_instance_below_capacity_has_no_queueing():
    c = cluster(profile(600), rate=1)  # arrivals at 1 s, 2 s, ...: the one at 30 s is the next window's
    w = c.advance()["svc"]
    assert (w.arrivals, w.completed, w.violations) == (29, 29, 0)
    assert w.mean_proc_time_ms == pytest.approx(600)
    # the monitor samples at whole seconds: a request arriving at that instant is not in yet and
    # the previous one finished 0.4 s before
    assert w.utilization == pytest.approx(0.0)
    two_s = Trace("every 2 s", np.full(15, 2.0), np.ones(15))  # arrivals at 2, 4, ... 30 s
    c2 = SimCluster({"svc": profile(1500)}, {"svc": two_s}, {"svc": 1.0})
    assert c2.advance()["svc"].utilization == pytest.approx(14 / 30)  # busy at 3, 5, ... 29 s


def test_one_instance_above_capacity_serves_at_capacity_and_drops_the_rest():
    c = cluster(profile(500, queue=3), rate=4)  # 4 req/s offered, 2 req/s served
    out = [c.advance()["svc"] for _ in range(3)]
    for w in out[1:]:
        assert w.utilization == pytest.approx(1.0)
        assert w.violations >= w.arrivals - 62
    # the steady state: the instance finishes 2 requests a second and drops the rest
    assert c.last_outcome["svc"].served == 60
    assert c.last_outcome["svc"].dropped == 60


def test_queue_length_is_what_waits_at_the_windows_end():
    """Below capacity nothing waits; overloaded, the queue is full (queue_limit 3 behind the one in
    service) at every window's end; with capacity 2, what exceeds the two slots."""
    assert [w.queue_length for w in (cluster(profile(600), rate=1).advance()["svc"],)] == [0]
    c = cluster(profile(500, queue=3), rate=4)
    assert [c.advance()["svc"].queue_length for _ in range(3)] == [3, 3, 3]
    # two slots of 1 s: 1.5 req/s fits, 3 req/s fills the queue of 10 behind the two in service
    assert cluster(profile(1000, queue=10, capacity=2), rate=1.5).advance()["svc"].queue_length == 0
    two = cluster(profile(1000, queue=10, capacity=2), rate=3)
    assert [two.advance()["svc"].queue_length for _ in range(2)] == [10, 10]


def test_queue_overflow_drops_exactly_what_does_not_fit():
    trace = Trace("burst", np.array([1.0, 29.0]), np.array([20.0, 0.0]))
    c = SimCluster({"svc": profile(1000, queue=3, slo_ms=10_000)}, {"svc": trace}, {"svc": 1.0})
    w = c.advance()["svc"]
    out = c.last_outcome["svc"]
    assert (out.served, out.dropped, w.violations) == (4, 16, 16)  # 1 in service + 3 queued


def test_new_instance_serves_only_after_its_startup_time():
    c = cluster(profile(500, queue=2, startup_ms=13000), rate=3)
    c.scale("svc", 2)
    assert c.ready_replicas("svc") == 1 and c.desired_replicas("svc") == 2
    first = c.advance()["svc"]
    assert first.violations > 0  # 3 req/s on one 2 req/s instance until t = 13 s
    assert first.instances == 2
    second = c.advance()["svc"]
    assert second.violations == 0  # 1.5 req/s per instance


def test_starting_instances_count_in_utilization_by_default():
    # one instance busy all the time; a second starts at t=0 and is ready at t=20 s
    def first_window(options):
        c = cluster(profile(1000, queue=50, startup_ms=20000), rate=2, options=options)
        c.scale("svc", 2)
        return c.advance()["svc"].utilization

    # samples at 0 (nothing arrived yet), 1..20 s at 1/2 (the starting instance serves nothing;
    # at 20 s its first request arrives at the sample instant), 21..29 s at 2/2
    assert first_window(SimOptions()) == pytest.approx((20 * 0.5 + 9 * 1.0) / 30)
    assert first_window(SimOptions(util_counts_starting=False)) == pytest.approx(29 / 30, abs=1 / 30)


def test_rate_limit_drops_what_exceeds_each_windows_quota():
    prof = profile(10, queue=10).replace(rate_limit=(3, 1.0))
    c = cluster(prof, rate=5)  # arrivals at k + 0.2, ..., k + 1.0: 3 admitted per second [k, k+1)
    w = c.advance()["svc"]
    out = c.last_outcome["svc"]
    assert (w.arrivals, out.served, out.dropped, w.violations) == (149, 90, 59, 59)
    # a 2-second window spans two trace seconds: 10 arrivals, 3 admitted
    c2 = cluster(prof.replace(rate_limit=(3, 2.0)), rate=5)
    assert c2.advance()["svc"].violations == 149 - 45


def test_scale_down_drains_the_last_instance_before_freeing_its_unit():
    c = cluster(profile(1000, queue=5, slo_ms=60_000), rate=2.5, units=2)
    c.scale("svc", 2)
    for _ in range(2):
        c.advance()
    assert c.free_units() == 0
    before = c.last_outcome["svc"]
    c.scale("svc", 1)
    assert c.desired_replicas("svc") == 1
    assert c.free_units() == 0  # its queued requests still finish
    c.advance()
    assert c.free_units() == 1
    assert before.window.instances == 2
    with pytest.raises(StateError):
        c.scale("svc", 0)


def test_scale_beyond_free_units_is_refused():
    c = cluster(profile(100), rate=1, units=2)
    with pytest.raises(StateError, match="more units"):
        c.scale("svc", 3)


def test_startup_takes_whole_seconds_between_startup_and_service_discovery():
    prof = profile(100, startup_ms=13000).replace(startup_max_ms=30000)
    svc = SimService(prof, np.empty(0), np.random.default_rng(0))
    delays = [svc.startup_delay() for _ in range(2000)]
    assert set(delays) == set(map(float, range(13, 31)))  # random.randint(13, 30) seconds
    assert PROFILES["tts"].startup_max_ms == 30000 and PROFILES["tts"].startup_ms == 21000


def test_slo_outcome_is_counted_in_the_window_the_request_finishes_in():
    # one 10 s request arriving at 25 s (SLO 1 s): late, and finished in the second window
    trace = Trace("one", np.array([24.0, 1.0, 35.0]), np.array([0.0, 1.0, 0.0]))
    def windows(counting):
        c = SimCluster({"svc": profile(10_000, slo_ms=1000)}, {"svc": trace}, {"svc": 1.0},
                       options=SimOptions(slo_counting=counting))
        return [c.advance()["svc"] for _ in range(2)]
    first, second = windows("completion")
    assert (first.arrivals, first.completed, first.violations) == (1, 0, 0)
    assert (second.arrivals, second.completed, second.violations) == (0, 1, 1)
    assert second.slo_violation_rate == 1.0 and second.mean_proc_time_ms == pytest.approx(10_000)
    first, second = windows("arrival")
    assert (first.completed, first.violations, second.completed) == (1, 1, 0)


def test_paper_profiles_carry_the_published_simulators_limits():
    assert PROFILES["imgcls"].rate_limit == (14, 1.0)
    assert PROFILES["chatbot"].rate_limit == PROFILES["tts"].rate_limit == (7, 2.0)
    assert PROFILES["chatbot"].queue_limit == 11


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("m", [1, 3])
def test_fast_kernel_matches_exact_walk(seed, m):
    rng = np.random.default_rng(seed)
    n, q = 400, 2
    a = np.sort(rng.uniform(0, 60, n))
    s = rng.uniform(0.1, 1.5, n)  # overloaded: many drops
    slot = rng.integers(0, m, n)
    pend_a = [[1.0, 2.5], [], [0.5]][:m]
    pend_b = [list(p) for p in pend_a]
    f_exact = serve_exact(a, s, slot, pend_a, 1, q)
    f_fast = serve_fast(a, s, slot, pend_b, q)
    assert np.isnan(f_exact).sum() > 10
    np.testing.assert_allclose(f_fast, f_exact, equal_nan=True)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("m", [2, 3, 5])
def test_fast_kernel_told_the_round_robin_pointer_is_the_same_to_the_bit(seed, m):
    rng = np.random.default_rng(seed)
    n, q, rr = int(rng.integers(1, 400)), 2, int(rng.integers(0, 2 * m))
    a = np.sort(rng.integers(0, 60_000, n)) / 1000.0
    s = rng.integers(100, 1500, n) / 1000.0
    slot = (rr + np.arange(n)) % m
    pend = [[1.0, 2.5], [], [0.5], [3.0], []][:m]
    copies = [list(p) for p in pend]
    sorted_ = serve_fast(a, s, slot, pend, q)
    told = serve_fast(a, s, slot, copies, q, rr)
    assert sorted_.tobytes() == told.tobytes() and pend == copies


def test_exact_kernel_handles_capacity_two():
    a = np.array([0.0, 0.0, 0.0, 0.0])
    s = np.array([1.0, 1.0, 1.0, 1.0])
    f = serve_exact(a, s, np.zeros(4, dtype=np.int64), [[]], capacity=2, queue_limit=1)
    np.testing.assert_allclose(f, [1.0, 1.0, 2.0, np.nan], equal_nan=True)


def _run(prof, seed, chunk, exact=False, steps=300):
    trace = Trace("wave", np.ones(steps * 30), 20 + 15 * np.sin(np.arange(steps * 30) / 900.0))
    arrivals = arrival_times(trace, 0.3)
    svc = SimService(prof, arrivals, np.random.default_rng(seed), exact=exact, max_chunk_steps=chunk)
    out, t = [], 0.0
    for k in range(steps):
        out.append(svc.advance(t, t + 30.0).window)
        t += 30.0
        if k % 7 == 3:
            svc.scale(1 + (k // 7) % 3, t)
    return out


def _same(xs, ys):
    assert len(xs) == len(ys)
    for x, y in zip(xs, ys, strict=True):
        assert (x.arrivals, x.violations, x.instances) == (y.arrivals, y.violations, y.instances)
        assert x.queue_length == y.queue_length
        assert x.utilization == pytest.approx(y.utilization)
        assert x.mean_proc_time_ms == pytest.approx(y.mean_proc_time_ms)


def test_chunked_simulation_equals_step_by_step_and_exact():
    prof = PROFILES["chatbot"]
    chunked = _run(prof, 1, chunk=128)
    _same(chunked, _run(prof, 1, chunk=1))
    _same(chunked, _run(prof, 1, chunk=16, exact=True))
    assert sum(w.violations for w in chunked) > 0


def test_chunked_simulation_with_rate_limit_equals_step_by_step_and_exact():
    prof = PROFILES["chatbot"].replace(rate_limit=(3, 2.0))
    chunked = _run(prof, 2, chunk=128)
    _same(chunked, _run(prof, 2, chunk=1))
    _same(chunked, _run(prof, 2, chunk=16, exact=True))
    assert sum(w.violations for w in chunked) > 0


def test_deterministic_under_seed():
    prof = PROFILES["tts"]
    assert _run(prof, 5, 64) == _run(prof, 5, 64)
    assert _run(prof, 5, 64) != _run(prof, 6, 64)


def _utilization_by_sample(svc: SimService, t0: float, steps: int, a, finish, owner, pending):
    """The definition, one sample and one instance at a time: in flight = arrived at or before
    the sample and not finished by it (requests held from before the window included)."""
    out = []
    for w in range(steps):
        per_sample = []
        for j in range(30):
            t = t0 + svc.util_sample_phase + 30 * w + j - 1e-6
            busy = present = 0.0
            for k, inst in enumerate(svc.instances):
                if svc.util_counts_starting:
                    alive = not inst.draining
                else:
                    alive = t + 2e-6 >= inst.ready_at and (inst.removed_at is None or t < inst.removed_at)
                if not alive:
                    continue
                held = sum(1 for f in pending[k] if f > t)
                held += sum(1 for x, f, o in zip(a, finish, owner, strict=True)
                            if o == k and not np.isnan(f) and x <= t < f)
                busy += min(held, inst_cap := svc.profile.capacity) / inst_cap
                present += 1
            if present:
                per_sample.append(busy / present)
        out.append(sum(per_sample) / len(per_sample) if per_sample else 0.0)
    return out


@pytest.mark.parametrize("counts_starting", [True, False])
@pytest.mark.parametrize("phase", [0.0, 0.5])
def test_utilization_matches_its_definition_sample_by_sample(counts_starting, phase):
    rng = np.random.default_rng(7)
    prof = profile(900.0, queue=5)
    arrivals = np.sort(rng.integers(0, 90_000, 120)) / 1000.0  # whole milliseconds, 3 windows
    svc = SimService(prof, arrivals, rng, reading=WindowReading(util_counts_starting=counts_starting,
                                                                util_sample_phase=phase))
    svc.instances[0].pending = [0.4, 1.2]
    svc.scale(3, 0.0)  # two more, starting: ready after the start-up delay
    svc.instances[1].ready_at, svc.instances[2].ready_at = 20.0, 45.5
    chunk = svc._serve_chunk(0.0, 30.0, 3)
    got = [chunk.outcomes[w].window.utilization for w in range(3)]
    want = _utilization_by_sample(svc, 0.0, 3, chunk.arrivals, chunk.finish, chunk.owner,
                                  chunk.start_pending)
    assert got == pytest.approx(want)
    assert min(got) > 0.0 and max(got) <= 1.0


@pytest.mark.parametrize("seed", range(6))
def test_round_robin_admission_equals_the_general_rate_limit(seed):
    """The sort-free admission the service uses for its round-robin dealing admits exactly what
    `rate_limit_admit` does, call after call, as the instance set and the pointer change."""
    rng = np.random.default_rng(seed)
    a = np.sort(rng.integers(0, 60_000, 900)) / 1000.0  # whole ms, dense enough to hit the limit
    cuts = np.sort(rng.choice(np.arange(1, len(a)), 3, replace=False))
    used = [np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)]
    last: dict[int, tuple[int, int]] = {}
    rr, admitted, limit, window = 0, 0, int(rng.integers(1, 8)), float(rng.choice([1.0, 2.0]))
    for part, m in zip(np.split(a, cuts), (1, 2, 5, 3), strict=True):
        targets = sorted(rng.choice(8, m, replace=False).tolist())
        who = np.asarray(targets)[(rr + np.arange(len(part))) % m]
        want = rate_limit_admit(part, who, limit, window, used)
        got = round_robin_admit(part, targets, rr, limit, window, last)
        assert got.tolist() == want.tolist()
        rr, admitted = (rr + len(part)) % m, admitted + int(got.sum())
    assert 0 < admitted < len(a)  # the limit did bind, and not on everything


def test_the_runs_latency_percentiles_count_each_served_request_once_and_change_nothing():
    """Every served request's latency reaches the histogram once, scaling's rewinds included
    (p50/p95/p99 within half a bucket of the exact ones over the same requests), and keeping
    them moves no figure."""
    from testbed.metrics.histogram import RELATIVE_ERROR, LatencyHistogram
    from testbed.profiles import default_profiles
    from testbed.scaler.factory import make_policy
    from testbed.train.evaluate import EvalRun, evaluate

    seen: list[np.ndarray] = []

    class Keeping(LatencyHistogram):
        def add(self, latencies_ms):
            seen.append(np.asarray(latencies_ms))
            super().add(latencies_ms)

    profiles = {"imgcls": default_profiles()["imgcls"]}
    rng = np.random.default_rng(5)
    trace = Trace("wave", np.ones(7200), rng.poisson(20 + 15 * np.sin(np.arange(7200) / 600)))
    runs = []
    for keep in (False, True):
        pol = {"imgcls": make_policy("rule_v2", "imgcls", total_units=8, profiles=profiles)}
        if keep:
            import testbed.train.evaluate as ev
            ev.LatencyHistogram, original = Keeping, ev.LatencyHistogram
        try:
            runs.append(evaluate(pol, {"imgcls": trace}, {"imgcls": 1.0}, total_units=8,
                                 profiles=profiles, run=EvalRun(latency_percentiles=keep))["imgcls"])
        finally:
            if keep:
                ev.LatencyHistogram = original
    plain, kept = runs
    assert (plain.slo_violation_rate, plain.instances, plain.reward) == (
        kept.slo_violation_rate, kept.instances, kept.reward)
    assert plain.instances > 1.2  # it scaled: the chunks were rewound
    x = np.concatenate(seen)
    # the served requests the periods counted (by the period they finished in: those in flight
    # at the end differ), against the latencies counted: a rewound chunk's again would be more
    cluster = SimCluster(profiles, {"imgcls": trace}, {"imgcls": 1.0}, total_units=8)
    loop = ScalerLoop(cluster, {"imgcls": make_policy("rule_v2", "imgcls", total_units=8,
                                                      profiles=profiles)},
                      cluster.latest_window, clock=lambda: cluster.now)
    served = 0
    while not cluster.done:
        cluster.advance()
        loop.decide("imgcls")
        served += cluster.last_outcome["imgcls"].served
    assert abs(len(x) - served) <= 20 and served > 100_000, (len(x), served)
    for q, got in ((0.5, kept.p50_latency_ms), (0.95, kept.p95_latency_ms),
                   (0.99, kept.p99_latency_ms)):
        exact = float(np.sort(x)[int(np.ceil(q * len(x))) - 1])
        assert abs(got / exact - 1) <= RELATIVE_ERROR + 1e-9, (q, got, exact)
