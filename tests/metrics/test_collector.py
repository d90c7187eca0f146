"""Instance utilization and window sums, with a hand-driven clock."""

import pytest

from testbed.metrics.collector import ServiceCollector, utilization_sample


def test_utilization_is_mean_of_capped_in_flight_over_capacity():
    assert utilization_sample([], 1) == 0.0
    assert utilization_sample([0, 1, 5], 1) == pytest.approx(2 / 3)
    assert utilization_sample([1, 2], 4) == pytest.approx((0.25 + 0.5) / 2)


def test_window_sums_the_last_intervals_and_counts_violations():
    now = [0.0]
    c = ServiceCollector("imgcls", slo_ms=500, capacity=1, clock=lambda: now[0])
    for second in range(1, 11):
        for _ in range(second):  # `second` arrivals in interval `second`
            c.arrival()
            c.completion(100.0 if second % 2 else 600.0, ok=True)
        now[0] = float(second)
        c.sample([1, 0])  # two instances, one busy: utilization 0.5
    c.arrival()
    c.completion(50.0, ok=False)  # failed, in the open interval
    w = c.window(3.0, [1, 0])
    # intervals closed at t=8, 9, 10 (> 7) plus the open one
    assert w.arrivals == 8 + 9 + 10 + 1
    assert w.completed == 28
    assert w.violations == 8 + 10 + 1  # the even seconds were slower than 500 ms, plus the failure
    assert w.utilization == pytest.approx(0.5)
    assert w.instances == 2
    assert w.request_rate == pytest.approx(28 / 3)
    assert w.mean_proc_time_ms == pytest.approx((8 * 600 + 9 * 100 + 10 * 600 + 50) / 28)


def test_window_before_any_sample_uses_the_instant():
    c = ServiceCollector("tts", slo_ms=2500, capacity=2, clock=lambda: 0.0)
    w = c.window(30, [2, 1])
    assert w.utilization == pytest.approx(0.75) and w.completed == 0 and w.slo_violation_rate == 0.0


class FakeClock:
    """A settable clock for the collector under test."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_window_rate_is_unbiased_by_a_partly_covered_interval():
    from testbed.metrics.collector import ServiceCollector

    clock = FakeClock()
    c = ServiceCollector("imgcls", slo_ms=500, capacity=1, clock=clock)
    for _ in range(10):  # ten 1-second intervals, 4 arrivals each
        for _ in range(4):
            c.arrival()
        clock.t += 1.0
        c.sample([0])
    clock.t += 0.5  # half of the open interval, 2 arrivals so far
    c.arrival()
    c.arrival()
    for seconds in (1.0, 3.0, 5.0, 30.0):
        w = c.window(seconds, [0])
        assert w.seconds <= seconds + 1e-6
        assert w.request_rate == pytest.approx(4.0)


def test_window_percentiles_are_of_its_served_requests_and_drops_are_counted():
    now = [0.0]
    c = ServiceCollector("imgcls", slo_ms=500, capacity=1, clock=lambda: now[0])
    for second in range(1, 61):  # a minute before the window: 10 s latencies, not in it
        c.arrival()
        c.completion(10_000.0, ok=True)
        now[0] = float(second)
        c.sample([1])
    for ms in range(1, 101):  # the window: 1..100 ms, and 20 dropped at once
        c.arrival()
        c.completion(float(ms), ok=True)
    for _ in range(20):
        c.arrival()
        c.completion(0.5, ok=False, dropped=True)
    now[0] = 61.0
    c.sample([1])
    w = c.window(1.0, [1])
    assert (w.arrivals, w.dropped, w.admitted) == (120, 20, 100)
    assert w.p50_latency_ms == pytest.approx(50.5) and w.p99_latency_ms == pytest.approx(99.01)
    assert w.p95_latency_ms == pytest.approx(95.05) and w.violations == 20
    # the latencies older than twice the widest window asked for are let go
    for second in range(62, 200):
        now[0] = float(second)
        c.sample([1])
    assert not any(t.latencies_ms for t in c.ticks if t.t_end < now[0] - 120)
