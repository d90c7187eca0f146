"""Trace parsing and the client's even spreading of requests."""

import numpy as np
import pytest

from testbed.errors import ConfigError
from testbed.sim.trace import Trace, arrival_times, read_trace, scaled_counts


def test_read_trace_and_bad_line(tmp_path):
    good = tmp_path / "t.txt"
    good.write_text("1 10\n2 4\n")
    tr = read_trace(good)
    assert tr.seconds == 3 and tr.max_rate == 10
    bad = tmp_path / "bad.txt"
    bad.write_text("1 10\n1 x\n")
    with pytest.raises(ConfigError, match=r"bad.txt:2"):
        read_trace(bad)


def test_arrivals_are_spread_evenly_and_counts_are_rounded_as_chosen():
    tr = Trace("t", np.array([1.0, 2.0]), np.array([4.0, 2.0]))
    # "ms" (the published client): a gap of floor(1000 d / n) ms before each request
    np.testing.assert_allclose(arrival_times(tr, 1.0), [0.25, 0.5, 0.75, 1.0, 2.0, 3.0])
    np.testing.assert_allclose(arrival_times(Trace.constant(3, 1), 1.0), [0.333, 0.666, 0.999])
    # "even" (the local testbed's client): from the interval's start, d / n apart
    np.testing.assert_allclose(arrival_times(tr, 1.0, spacing="even"), [0, 0.25, 0.5, 0.75, 1.0, 2.0])
    with pytest.raises(ConfigError, match="spacing"):
        arrival_times(tr, 1.0, spacing="poisson")
    # "floor" (the dissertation's client): int(count * ratio) per interval, fractions lost
    assert len(arrival_times(Trace.constant(1, 10), 0.15)) == 0
    np.testing.assert_array_equal(scaled_counts(Trace.constant(7, 3), 0.5), [3, 3, 3])
    # "carry": the running sum is floored, so the total matches count * ratio
    assert len(arrival_times(Trace.constant(1, 10), 0.15, "carry")) == 1
    assert len(arrival_times(Trace.constant(1, 20), 0.15, "carry")) == 3
    np.testing.assert_array_equal(scaled_counts(Trace.constant(7, 3), 0.5, "carry"), [3, 4, 3])
    with pytest.raises(ConfigError, match="rounding"):
        scaled_counts(Trace.constant(7, 3), 0.5, "round")
