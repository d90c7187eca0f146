"""A mergeable latency histogram: log-spaced buckets 1 % wide, so that a day of requests is a few
thousand counts, histograms of cells, workers and segments add up, and a percentile is within
half a bucket (0.5 %) of the exact one."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

GROWTH = 1.01  # each bucket is 1 % wider than the one before
FLOOR_MS = 0.01  # latencies below this share the first bucket
_LOG = math.log(GROWTH)
BUCKETS = math.ceil(math.log(1e8 / FLOOR_MS) / _LOG) + 1  # up to about 28 hours
RELATIVE_ERROR = (GROWTH - 1) / 2  # a percentile's bound, relative, against the exact one


class LatencyHistogram:
    """Counts of latencies (ms) in log-spaced buckets; `add` takes arrays, `merge` another
    histogram, `quantile` reads one back (the geometric middle of its bucket)."""

    def __init__(self, counts: np.ndarray | None = None):
        self.counts = np.zeros(BUCKETS, dtype=np.int64) if counts is None else counts.astype(np.int64)

    @property
    def count(self) -> int:
        """The latencies counted."""
        return int(self.counts.sum())

    def add(self, latencies_ms: np.ndarray | Iterable[float]) -> None:
        """Count these latencies (ms; NaN left out)."""
        x = np.asarray(latencies_ms, dtype=np.float64)
        x = x[x == x]
        if not len(x):
            return
        i = np.floor(np.log(np.maximum(x, FLOOR_MS) / FLOOR_MS) / _LOG).astype(np.int64)
        self.counts += np.bincount(np.minimum(i, BUCKETS - 1), minlength=BUCKETS)

    def merge(self, other: LatencyHistogram) -> LatencyHistogram:
        """This histogram with `other`'s counts added (in place; returned for chaining)."""
        self.counts += other.counts
        return self

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0 < q <= 1) in ms, within RELATIVE_ERROR of the latency of rank
        ceil(q n); None when nothing was counted."""
        n = self.count
        if n == 0:
            return None
        rank = max(1, math.ceil(q * n - 1e-9))
        i = int(np.searchsorted(np.cumsum(self.counts), rank))
        return FLOOR_MS * GROWTH ** (i + 0.5)

    def percentiles(self) -> dict[str, float | None]:
        """`p50_latency_ms`, `p95_latency_ms` and `p99_latency_ms`, as result rows name them."""
        return {f"p{q}_latency_ms": self.quantile(q / 100) for q in (50, 95, 99)}

    def to_json(self) -> dict[str, int]:
        """The non-empty buckets, {index: count} with string keys (JSON's)."""
        return {str(i): int(c) for i, c in enumerate(self.counts) if c}

    @classmethod
    def from_json(cls, data: Mapping[str, int]) -> LatencyHistogram:
        """The histogram `to_json` wrote."""
        counts = np.zeros(BUCKETS, dtype=np.int64)
        for i, c in data.items():
            counts[int(i)] = c
        return cls(counts)
