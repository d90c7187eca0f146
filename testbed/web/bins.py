"""What a cell's fold keeps per time bin and so far: each service's answers, latencies, time in
flight and replicas per bin, its running tally, and each slice's or UE group's rate and drops, and
the series the live page draws from them."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

from testbed.load.stats import percentile

MAX_BINS = 1200  # per cell: one scenario second each up to 20 minutes, wider beyond


def bin_width(span_s: float) -> float:
    """The bin of a cell `span_s` scenario seconds long (warm-up and window): whole seconds, at
    most MAX_BINS of them.

    span_s: the cell's planned scenario seconds."""
    return float(max(1, math.ceil(span_s / MAX_BINS)))


@dataclass
class ServiceBins:
    """One service's per-bin counts; `p50`.. filled from `lat` for the bins marked dirty."""
    completed: list[int] = field(default_factory=list)
    errors: list[int] = field(default_factory=list)
    violations: list[int] = field(default_factory=list)
    busy_s: list[float] = field(default_factory=list)  # request-seconds in flight in the bin
    lat: list[array] = field(default_factory=list)  # ok scenario latencies answered in the bin
    p50: list[float | None] = field(default_factory=list)
    p95: list[float | None] = field(default_factory=list)
    p99: list[float | None] = field(default_factory=list)
    ready: list[int | None] = field(default_factory=list)
    desired: list[int | None] = field(default_factory=list)
    dirty: set[int] = field(default_factory=set)

    def grow(self, n: int) -> None:
        while len(self.completed) < n:
            for name in ("completed", "errors", "violations"):
                getattr(self, name).append(0)
            self.busy_s.append(0.0)
            self.lat.append(array("d"))
            for name in ("p50", "p95", "p99", "ready", "desired"):
                getattr(self, name).append(None)

    def settle(self) -> None:
        """The dirty bins' percentiles."""
        for i in self.dirty:
            values = self.lat[i]
            self.p50[i] = percentile(values, 0.5)
            self.p95[i] = percentile(values, 0.95)
            self.p99[i] = percentile(values, 0.99)
        self.dirty.clear()

    def series(self, start: int, n: int, w: float) -> dict[str, list]:
        """The live page's series of bins [start, n), each `w` scenario seconds wide."""
        rng = range(start, n)
        return {
            "rate": [self.completed[i] / w for i in rng],
            "errors": [self.errors[i] / w for i in rng],
            "viol": [100.0 * self.violations[i] / self.completed[i] if self.completed[i] else None
                     for i in rng],
            "p50": [_r(self.p50[i]) for i in rng], "p95": [_r(self.p95[i]) for i in rng],
            "p99": [_r(self.p99[i]) for i in rng],
            "ready": self.ready[start:n], "desired": self.desired[start:n],
            "inflight": [round(self.busy_s[i] / w, 3) for i in rng]}


@dataclass
class Tally:
    """One service's measured requests so far, as `service_row` counts them."""
    requests: int = 0
    errors: int = 0
    violations: int = 0
    latency_sum_ms: float = 0.0
    ok_ms: array = field(default_factory=lambda: array("d"))
    lags_ms: array = field(default_factory=lambda: array("d"))  # scenario ms behind schedule
    ready_sum: int = 0
    samples: int = 0


@dataclass
class LinkBins:
    """One slice's or UE group's class in one direction: Mbit/s (the mean of its samples in the
    bin) and packets dropped."""
    rate_sum: list[float] = field(default_factory=list)
    rate_n: list[int] = field(default_factory=list)
    drops: list[int] = field(default_factory=list)

    def grow(self, n: int) -> None:
        while len(self.rate_sum) < n:
            self.rate_sum.append(0.0)
            self.rate_n.append(0)
            self.drops.append(0)

    def series(self, start: int, n: int, wall_s: float) -> dict[str, list]:
        """The live page's series of bins [start, n), each `wall_s` wall seconds wide."""
        rng = range(start, n)
        return {
            "mbit": [round(self.rate_sum[i] / self.rate_n[i], 3) if self.rate_n[i] else None
                     for i in rng],
            "drops": [round(self.drops[i] / wall_s, 3) for i in rng]}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 2)
