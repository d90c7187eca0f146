"""WindowMetrics.fast builds the constructor's window."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from testbed.metrics.window import WindowMetrics


def test_the_fast_window_is_the_constructors():
    args = ("chatbot", 30.0, 120, 118, 3, 0.625, 2, 281.5)
    fast, slow = WindowMetrics.fast(*args), WindowMetrics(*args)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.slo_violation_rate == slow.slo_violation_rate and fast.request_rate == 4.0
    assert WindowMetrics.fast(*args[:-1]) == WindowMetrics(*args[:-1])
    with pytest.raises(FrozenInstanceError):
        fast.arrivals = 1  # type: ignore[misc]
