"""The per-cell comparison of the in-process and Prometheus metrics sources: each tolerance holds
at its edge and fails past it."""

import json
from pathlib import Path

import pytest

from testbed.metrics.agreement import COUNT_REL, LATENCY_REL, UTILIZATION_ABS, compare
from testbed.metrics.window import WindowMetrics

ROOT = Path(__file__).resolve().parents[2]


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


def test_a_doctored_utilization_is_a_miss_naming_the_metric_the_values_and_the_bound():
    """What the cell of issue 34 read when imgcls scaled from 1 to 2 replicas under the old query."""
    a = compare(_w(util=0.588), _w(util=0.506))
    assert not a.agrees
    assert a.misses == (f"utilization 0.588 in-process vs 0.506 prometheus (bound ±{UTILIZATION_ABS})",)


class _DoctoredProfile:
    """A profile whose cell sends nothing and then compares two doctored metrics windows, as the
    local profile's `--metrics prometheus` cell does at its end (`record_agreement`)."""

    name = "doctored"

    def __init__(self, prometheus_utilization: float):
        self.prometheus_utilization = prometheus_utilization

    def run_cell(self, job, main):
        from testbed.scenario.backends import record_agreement

        outcome = job.outcome
        record_agreement(outcome, [compare(_w(util=0.588), _w(util=self.prometheus_utilization))],
                         job.view.log)
        return outcome

    def close(self) -> list[str]:
        return []


@pytest.mark.parametrize("prometheus", [0.506, 0.58])
def test_a_cell_whose_sources_disagree_fails_and_so_does_the_run(tmp_path, prometheus: float):
    from testbed.scenario.load import load_scenario
    from testbed.scenario.runner import RunOptions, ScenarioRun

    loaded = load_scenario(ROOT / "scenarios" / "metrics-prometheus-ci.yaml")
    options = RunOptions(out_root=tmp_path, profile="lab", progress=False,
                         profile_factory=lambda run: _DoctoredProfile(prometheus))
    with ScenarioRun(loaded, options) as run:
        for cell in run.cells:
            run.run_cell(cell)
    result = run.finish()
    info = json.loads(next(result.run_dir.glob("cells/*/rep-0/cell.json")).read_text())
    assert info["metrics_agreement"][0]["prometheus"]["utilization"] == prometheus
    if prometheus == 0.58:  # within the bound: the cell stays ok
        assert info["status"] == "ok" and not info["problems"]
        assert not result.failed_cells
        return
    line = (f"metrics sources disagree on imgcls: utilization 0.588 in-process vs 0.506 "
            f"prometheus (bound ±{UTILIZATION_ABS})")
    assert info["status"] == "failed" and info["failures"] == [line] and line in result.problems
    assert {r["status"] for r in result.rows} == {"failed"}
    assert result.failed_cells and not result.passed
    # every check reads the failed cell: none can pass, each fails the run (`testbed run` exits 1)
    assert result.outcomes and all(o.fails_run for o in result.outcomes)
