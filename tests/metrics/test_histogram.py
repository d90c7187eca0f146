"""The mergeable latency histogram: percentiles within half a bucket of the exact ones, merges
that add up, and a JSON form that reads back."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.metrics.histogram import RELATIVE_ERROR, LatencyHistogram


def _exact(x: np.ndarray, q: float) -> float:
    return float(np.sort(x)[max(1, int(np.ceil(q * len(x) - 1e-9))) - 1])


@pytest.mark.parametrize("q", [0.5, 0.95, 0.99])
def test_a_percentile_is_within_half_a_bucket_of_the_exact_one(q: float):
    x = np.random.default_rng(1).lognormal(np.log(80), 0.8, 200_000)
    h = LatencyHistogram()
    h.add(x)
    assert abs(h.quantile(q) / _exact(x, q) - 1) <= RELATIVE_ERROR + 1e-9


def test_halves_merged_are_the_whole_and_json_reads_back():
    x = np.random.default_rng(2).exponential(50, 10_000)
    whole, a, b = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    whole.add(x)
    a.add(x[:4_000])
    b.add(x[4_000:])
    merged = LatencyHistogram.from_json(a.to_json()).merge(b)
    assert np.array_equal(merged.counts, whole.counts) and merged.count == 10_000
    assert merged.percentiles() == whole.percentiles()
    assert LatencyHistogram().quantile(0.5) is None
