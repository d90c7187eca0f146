"""A record subscriber that keeps the last seconds of requests for a live view: rate, latency
percentiles, SLO-violation rate, errors by kind."""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

from testbed.load.records import RequestRecord


@dataclass(frozen=True)
class LiveFigures:
    """The live view's figures over its window: completion rate, p50/p99 latency from the schedule,
    SLO violation rate, errors by kind and the total."""
    rate: float  # completed requests per second over the window
    p50_ms: float | None
    p99_ms: float | None  # latency from the scheduled time (coordinated omission visible)
    violation_rate: float
    errors: dict[str, int]
    total: int


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0 <= q <= 1) of `values`, interpolated linearly between the two nearest
    ranks (numpy's default); None for no values. The project's one percentile: the published
    p50/p99 rows, the load client's summary and live view, and the profiler all use it."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


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
        """The figures now."""
        now = self.clock()
        while self._recent and self._recent[0][0] < now - self.window_s:
            self._recent.popleft()
        lat = sorted(x[1] for x in self._recent)
        n = len(self._recent)
        return LiveFigures(rate=n / self.window_s, p50_ms=percentile(lat, 0.5), p99_ms=percentile(lat, 0.99),
                           violation_rate=(sum(1 for x in self._recent if x[2]) / n) if n else 0.0,
                           errors=dict(self.errors), total=self.total)


SUMMARY_PERCENTILES = (0.5, 0.9, 0.95, 0.99)


class RunTotals:
    """A record subscriber for the end-of-run summary: every latency, errors by kind, bytes."""

    def __init__(self, slo_ms: float, clock=time.monotonic):  # type: ignore[no-untyped-def]
        self.slo_ms = slo_ms
        self.clock = clock
        self.started = clock()
        self.latencies_ms: list[float] = []  # from the scheduled send: the client's lateness shows
        self.errors: Counter[str] = Counter()
        self.violations = 0
        self.bytes_up = 0
        self.bytes_down = 0

    def __call__(self, record: RequestRecord) -> None:
        self.latencies_ms.append(record.latency_sched_ms)
        if record.error:
            self.errors[record.error] += 1
        if (not record.ok) or record.latency_sched_ms > self.slo_ms:
            self.violations += 1
        if record.error != "unreachable":  # a connection that never opened sent nothing
            self.bytes_up += record.bytes_up
        self.bytes_down += record.bytes_down

    @property
    def finished(self) -> int:
        """Requests that ended, answered or not."""
        return len(self.latencies_ms)

    @property
    def error_rate(self) -> float:
        """Failed requests over finished ones; requests the client cancelled when it was stopped
        are not the service's failures."""
        failed = sum(n for kind, n in self.errors.items() if kind != "cancelled")
        return failed / self.finished if self.finished else 0.0

    def summary(self, elapsed_s: float | None = None) -> dict[str, object]:
        """The figures as plain data (the CLI prints them as a table or as JSON).

        elapsed_s: the run's seconds, for its rate."""
        elapsed = self.clock() - self.started if elapsed_s is None else elapsed_s
        lat = sorted(self.latencies_ms)
        pct = {f"p{round(q * 100)}_ms": percentile(lat, q) for q in SUMMARY_PERCENTILES}
        return {
            "finished": self.finished, "ok": self.finished - sum(self.errors.values()),
            "elapsed_s": round(elapsed, 3),
            "rate_per_s": round(self.finished / elapsed, 3) if elapsed > 0 else 0.0,
            **pct, "max_ms": lat[-1] if lat else None,
            "slo_ms": self.slo_ms, "slo_violations": self.violations,
            "errors": dict(sorted(self.errors.items())), "error_rate": round(self.error_rate, 4),
            "bytes_sent": self.bytes_up, "bytes_received": self.bytes_down,
        }
