"""Per-service counters sampled every interval (arrivals, completions, SLO violations, latency,
instance utilization) and their sum over a window: what the in-process load balancer measures."""

from __future__ import annotations

import time
from array import array
from collections import deque
from dataclasses import dataclass, field

from testbed.metrics.window import WindowMetrics, latency_percentiles


@dataclass
class Tick:
    """Counts of one sampling interval, closed at `t_end` (monotonic seconds)."""

    t_end: float
    arrivals: int = 0
    completed: int = 0
    violations: int = 0
    latency_sum_ms: float = 0.0
    upload_sum_ms: float = 0.0  # of latency_sum_ms, the time spent receiving the requests' bodies
    dropped: int = 0  # refused on arrival (503: a full queue, no ready replica)
    # of the served ones (not dropped), kept while a window may still ask for them
    latencies_ms: array = field(default_factory=lambda: array("d"))
    utilization: float = 0.0  # mean over ready instances of min(in_flight, capacity)/capacity
    instances: int = 0
    ready_s: float = 0.0  # how long in the interval some instance was ready: its utilization's weight


def utilization_sample(in_flight: list[int], capacity: int) -> float:
    """The dissertation's instance utilization at one instant; 0 with no ready instance."""
    if not in_flight:
        return 0.0
    return sum(min(n, capacity) / capacity for n in in_flight) / len(in_flight)


class ServiceCollector:
    """Accumulates one service's events; `sample()` closes an interval; `window()` sums intervals."""

    def __init__(self, service: str, slo_ms: float, capacity: int, keep_s: float = 3600.0,
                 clock=time.monotonic):  # type: ignore[no-untyped-def]
        self.service = service
        self.slo_ms = slo_ms
        self.capacity = capacity
        self.keep_s = keep_s
        self.clock = clock
        self.ticks: deque[Tick] = deque()
        self._open = Tick(t_end=0.0)
        self._first_start = clock()  # where the oldest interval began
        self.total_arrivals = 0
        self.total_violations = 0
        self._widest_s = 60.0  # the longest window asked for so far (latencies kept for it)

    def arrival(self) -> None:
        self._open.arrivals += 1
        self.total_arrivals += 1

    def completion(self, latency_ms: float, ok: bool, dropped: bool = False,
                   upload_ms: float = 0.0) -> bool:
        """Count a finished request (`dropped`: refused on arrival, which also fails it; of its
        `latency_ms`, `upload_ms` receiving its body); returns True when it violated the SLO."""
        violated = (not ok) or dropped or latency_ms > self.slo_ms
        self._open.completed += 1
        self._open.latency_sum_ms += latency_ms
        self._open.upload_sum_ms += upload_ms
        if dropped:
            self._open.dropped += 1
        else:
            self._open.latencies_ms.append(latency_ms)
        if violated:
            self._open.violations += 1
            self.total_violations += 1
        return violated

    def sample(self, in_flight: list[int], utilization: float | None = None,
               ready_s: float | None = None) -> Tick:
        """Close the current interval; its utilization is `utilization` when the caller measured
        it over the interval (time-weighted over the `ready_s` seconds some instance was ready),
        else an instantaneous sample of the ready instances, standing for the whole interval
        when there is one."""
        now = self.clock()
        tick = self._open
        tick.t_end = now
        tick.utilization = (utilization_sample(in_flight, self.capacity) if utilization is None
                            else utilization)
        tick.instances = len(in_flight)
        if ready_s is None:
            began = self.ticks[-1].t_end if self.ticks else self._first_start
            ready_s = max(now - began, 0.0) if in_flight else 0.0
        tick.ready_s = ready_s
        self.ticks.append(tick)
        self._open = Tick(t_end=0.0)
        while self.ticks and self.ticks[0].t_end < now - self.keep_s:
            self._first_start = self.ticks.popleft().t_end
        # the latencies themselves only as far back as the widest window asked for (twice, for
        # the interval it starts in): at a thousand requests a second an hour of them is 29 MB
        for t in self.ticks:
            if t.t_end >= now - 2 * self._widest_s:
                break
            if t.latencies_ms:
                t.latencies_ms = array("d")
        return tick

    def window(self, seconds: float, in_flight_now: list[int], waiting_now: int = 0) -> WindowMetrics:
        """Counts of the closed intervals that lie inside the last `seconds`, plus the open one;
        `waiting_now` is the queue length now (requests at the replicas beyond their capacity).

        `seconds` of the result is the span actually covered (from the start of the oldest
        interval taken to now), so `arrivals / seconds` is the rate without the bias of a
        partly covered interval."""
        now = self.clock()
        self._widest_s = max(self._widest_s, seconds)
        since = now - seconds - 1e-6
        # closed intervals that lie inside the window, plus the open one (last close .. now):
        # counting every interval that merely overlaps it would count up to one interval twice
        picked = []
        start = self._first_start
        covered_from = self.ticks[-1].t_end if self.ticks else self._first_start
        for t in self.ticks:
            if start >= since:
                if not picked:
                    covered_from = start
                picked.append(t)
            start = t.t_end
        arrivals = self._open.arrivals + sum(t.arrivals for t in picked)
        completed = self._open.completed + sum(t.completed for t in picked)
        violations = self._open.violations + sum(t.violations for t in picked)
        lat = self._open.latency_sum_ms + sum(t.latency_sum_ms for t in picked)
        upload = self._open.upload_sum_ms + sum(t.upload_sum_ms for t in picked)
        dropped = self._open.dropped + sum(t.dropped for t in picked)
        served = [x for t in (*picked, self._open) for x in t.latencies_ms]
        if picked:
            # time-weighted: each interval by how long an instance was ready in it (an interval
            # without one does not count: docs/metrics.md)
            ready = sum(t.ready_s for t in picked)
            if ready > 0:
                util = sum(t.utilization * t.ready_s for t in picked) / ready
            else:  # a clock that did not move (tests): the intervals with an instance, alike
                held = [t.utilization for t in picked if t.instances]
                util = sum(held) / len(held) if held else 0.0
        else:
            util = utilization_sample(in_flight_now, self.capacity)
        return WindowMetrics(
            service=self.service, seconds=max(now - covered_from, 1e-9), arrivals=arrivals,
            completed=completed,
            violations=violations, utilization=util, instances=len(in_flight_now),
            mean_latency_ms=(lat / completed) if completed else None,
            queue_length=waiting_now, dropped=dropped, **latency_percentiles(served),
            mean_upload_ms=(upload / completed) if completed else None,
        )
