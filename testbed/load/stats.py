"""A record subscriber that keeps the last seconds of requests for a live view: rate, latency
percentiles, SLO-violation rate, errors by kind."""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass

from testbed.load.records import RequestRecord


@dataclass(frozen=True)
class LiveFigures:
    rate: float  # completed requests per second over the window
    p50_ms: float | None
    p99_ms: float | None  # latency from the scheduled time (coordinated omission visible)
    violation_rate: float
    errors: dict[str, int]
    total: int


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[idx]


class LiveStats:
    """Subscribe it to a client (`sinks=[stats]`); call `figures()` from the display loop."""

    def __init__(self, slo_ms: float, window_s: float = 5.0, clock=time.monotonic):  # type: ignore[no-untyped-def]
        self.slo_ms = slo_ms
        self.window_s = window_s
        self.clock = clock
        self._recent: deque[tuple[float, float, bool]] = deque()
        self.total = 0
        self.errors: Counter[str] = Counter()

    def __call__(self, record: RequestRecord) -> None:
        self.total += 1
        if record.error:
            self.errors[record.error] += 1
        violated = (not record.ok) or record.latency_sched_ms > self.slo_ms
        self._recent.append((self.clock(), record.latency_sched_ms, violated))

    def figures(self) -> LiveFigures:
        now = self.clock()
        while self._recent and self._recent[0][0] < now - self.window_s:
            self._recent.popleft()
        lat = sorted(x[1] for x in self._recent)
        n = len(self._recent)
        return LiveFigures(rate=n / self.window_s, p50_ms=percentile(lat, 0.5), p99_ms=percentile(lat, 0.99),
                           violation_rate=(sum(1 for x in self._recent if x[2]) / n) if n else 0.0,
                           errors=dict(self.errors), total=self.total)
