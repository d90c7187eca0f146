"""A scenario's `measure:`: checked with its line, run where it is built, and recorded in the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.errors import ConfigError
from testbed.report import write_report
from testbed.scenario.load import load_scenario, parse_scenario
from testbed.scenario.runner import RunOptions, run_scenario
from testbed.scenario.simcell import run_sim_cell

SIM = """\
name: measured
engine: sim
duration_s: 1800
services:
  - {name: imgcls, policy: rule_v2}
clients:
  - {service: imgcls, trace: test/day7-shift8h.txt, ratio: 0.4, start_s: 39600}
traces_dir: package
"""


def _problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_scenario(text, "scn.yaml")
    return [str(p) for p in exc.value.problems]


def test_an_unknown_way_of_measuring_is_one_error_with_its_line():
    problems = _problems(SIM + "measure: prometheus\n")
    assert problems == ["scn.yaml:9: measure: unknown way of measuring 'prometheus'; known: "
                        "harness, drafas"]


def test_drafas_is_refused_where_it_is_not_built_yet():
    testbed = SIM.replace("engine: sim\n", "").replace("ratio: 0.4,", "ratio: 0.4, ue_group: ai,")
    problems = _problems(testbed + "measure: drafas\n")
    assert len(problems) == 1 and problems[0].startswith("scn.yaml:8: measure: measure: drafas is "
                                                         "built for the simulator engine")


def test_drafas_reads_the_cell_another_way_than_the_harness():
    harness = parse_scenario(SIM, "scn.yaml").scenario
    drafas = parse_scenario(SIM + "measure: drafas\n", "scn.yaml").scenario
    assert harness.measure == "harness" and drafas.measure == "drafas"
    a = run_sim_cell(harness, Path.cwd(), seed=0)["imgcls"]
    b = run_sim_cell(drafas, Path.cwd(), seed=0)["imgcls"]
    assert (a["reward"], a["slo_violation_rate"]) != (b["reward"], b["slo_violation_rate"])


def test_the_run_records_and_reports_how_it_measured(tmp_path):
    (tmp_path / "scn.yaml").write_text(SIM.replace("duration_s: 1800", "duration_s: 300")
                                       + "measure: drafas\n")
    result = run_scenario(load_scenario(tmp_path / "scn.yaml"),
                          RunOptions(out_root=tmp_path / "runs", progress=False))
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["scenario"]["measure"] == "drafas"
    assert {r["measure"] for r in result.rows if "service" in r} == {"drafas"}
    md, _ = write_report(result.run_dir)
    assert "measure: drafas (the DRAFAS testbed's Prometheus" in md.read_text()
