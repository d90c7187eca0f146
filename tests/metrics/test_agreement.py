"""The per-cell comparison of the in-process and Prometheus metrics sources: each tolerance holds
at its edge and fails past it."""

import pytest

from testbed.metrics.agreement import COUNT_REL, LATENCY_REL, UTILIZATION_ABS, compare
from testbed.metrics.window import WindowMetrics


def _w(completed=500, violations=100, ms=200.0, util=0.5) -> WindowMetrics:
    return WindowMetrics("imgcls", 15.0, completed, completed, violations, util, 2, ms)


def test_equal_sources_agree_and_say_so():
    a = compare(_w(), _w())
    assert a.agrees and a.misses == ()
    assert "completed 500 / 500" in a.line() and a.line().endswith("agree")
    assert a.row()["prometheus"]["utilization"] == 0.5


@pytest.mark.parametrize(("other", "what"), [
    (_w(completed=round(500 * (1 + COUNT_REL)) + 2), "completed"),
    (_w(violations=100 - 4), "violations"),  # 4 of 100 > 2 %
    (_w(ms=200.0 * (1 + LATENCY_REL) + 1.0), "mean latency"),  # 5 % of the larger
    (_w(util=0.5 + UTILIZATION_ABS + 0.01), "utilization"),
    (_w(ms=None), "mean latency"),
])
def test_each_tolerance_fails_past_its_edge(other: WindowMetrics, what: str):
    a = compare(_w(), other)
    assert not a.agrees
    assert a.misses[0].startswith(what)
    assert "DISAGREE" in a.line()


def test_inside_the_tolerances_agrees():
    assert compare(_w(), _w(completed=509, violations=102, ms=209.0, util=0.549)).agrees
    # a handful of requests: one request of difference is within the floor
    assert compare(_w(completed=10, violations=1), _w(completed=11, violations=0)).agrees
