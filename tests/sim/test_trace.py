"""Trace parsing and the client's even spreading of requests."""

import numpy as np
import pytest

from testbed.errors import ConfigError
from testbed.sim.trace import Trace, arrival_times, read_trace


def test_read_trace_and_bad_line(tmp_path):
    good = tmp_path / "t.txt"
    good.write_text("1 10\n2 4\n")
    tr = read_trace(good)
    assert tr.seconds == 3 and tr.max_rate == 10
    bad = tmp_path / "bad.txt"
    bad.write_text("1 10\n1 x\n")
    with pytest.raises(ConfigError, match=r"bad.txt:2"):
        read_trace(bad)


def test_arrivals_are_spread_evenly_and_ratio_carries_fractions():
    tr = Trace("t", np.array([1.0, 2.0]), np.array([4.0, 2.0]))
    np.testing.assert_allclose(arrival_times(tr, 1.0), [0, 0.25, 0.5, 0.75, 1.0, 2.0])
    tr2 = Trace.constant(1, 10)
    assert len(arrival_times(tr2, 0.15)) == 1  # 10 * 0.15 = 1.5 -> 1, the fraction carried
    assert len(arrival_times(Trace.constant(1, 20), 0.15)) == 3
