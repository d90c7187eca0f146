"""`window_starts` finds by search what `window_of` and a bincount count time by time."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.sim.windows import window_of, window_starts


@pytest.mark.parametrize("seed", range(8))
def test_window_starts_equal_the_counts_of_window_of(seed):
    rng = np.random.default_rng(seed)
    step = float(rng.choice([1.0, 2.5, 30.0, 3600.0]))
    steps = int(rng.integers(1, 40))
    t0 = float(rng.integers(0, 1000)) * step
    # whole milliseconds, many on the window edges and a few past the last window
    t = rng.integers(0, int(steps * step * 1000) + 2000, 400) / 1000.0 + t0
    edges = t0 + step * rng.integers(0, steps + 2, 60)
    t = np.sort(np.concatenate((t, edges, edges - 0.001, np.nextafter(edges, 0), np.nextafter(edges, np.inf))))
    t = t[t >= t0]  # a chunk's arrivals start at its origin
    want = np.bincount(np.minimum(window_of(t, t0, step), steps - 1), minlength=steps)
    got = np.diff(window_starts(t, t0, step, steps))
    assert got.tolist() == want.tolist()
    assert window_starts(t[:0], t0, step, steps).tolist() == [0] * (steps + 1)
