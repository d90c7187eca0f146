"""WindowMetrics.fast builds the constructor's window."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from testbed.metrics.window import WindowMetrics


def test_the_fast_window_is_the_constructors():
    args = {"service": "chatbot", "seconds": 30.0, "arrivals": 120, "completed": 118,
            "violations": 3, "utilization": 0.625, "instances": 2, "mean_latency_ms": 281.5}
    fast, slow = WindowMetrics.fast(**args), WindowMetrics(**args)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.slo_violation_rate == slow.slo_violation_rate and fast.request_rate == 4.0
    del args["mean_latency_ms"]
    assert WindowMetrics.fast(**args) == WindowMetrics(**args)
    with pytest.raises(FrozenInstanceError):
        fast.arrivals = 1  # type: ignore[misc]
