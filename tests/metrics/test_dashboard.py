"""The Grafana dashboard: its JSON as shipped, every query accepted by the PromQL parser, and
every query answering with data from the real local Prometheus of a `--metrics prometheus` run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import promql_parser
import pytest

from testbed.metrics.dashboard import SHIPPED, dashboard
from testbed.pytest_plugin import BESIDE_GROUP
from tests.conftest import namespaces_with_prefix, run_scenario_cli

ROOT = Path(__file__).resolve().parents[2]


def _exprs() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]


def test_the_shipped_json_is_the_generated_one():
    assert json.loads(SHIPPED.read_text()) == dashboard(), \
        "run `python -m testbed.metrics.dashboard` to rewrite it"
    titles = [p["title"] for p in dashboard()["panels"]]
    assert titles == ["Throughput per slice", "Latency per service", "Replicas", "SLO violations",
                      "Scaling actions (last 10 min)"]


@pytest.mark.parametrize("expr", _exprs())
def test_every_query_passes_the_promql_parser(expr):
    promql_parser.parse(expr)


@pytest.mark.needs_root
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="no prometheus server on PATH")
@pytest.mark.xdist_group(BESIDE_GROUP)  # one such testbed at a time
def test_every_query_answers_from_the_real_prometheus_of_a_local_run(tmp_path: Path):
    """scenarios/metrics-prometheus-ci.yaml, as CI runs it: at the end of its cell every query
    returned at least one series (the cell keeps the counts in cell.json)."""
    run, cell = run_scenario_cli(ROOT / "scenarios" / "metrics-prometheus-ci.yaml", tmp_path)
    assert cell is not None, run.stderr[-2000:]
    answered = json.loads((cell / "cell.json").read_text())["dashboard_queries"]
    assert len(answered) == len(_exprs())
    assert all(n > 0 for n in answered.values()), answered
    assert answered["Throughput per slice: {{slice}} {{direction}}"] >= 2  # ai up and down
    assert namespaces_with_prefix("tb-promci-") == []
