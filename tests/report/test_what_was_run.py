"""The report's "What was run" section, from run directories the real code writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.report import write_report
from testbed.report.what_was_run import PER_CELL
from testbed.scenario.load import load_scenario
from testbed.scenario.matrix import expand
from testbed.scenario.rundir import CellDir, write_manifest
from testbed.scenario.runner import RunOptions, run_scenario

TESTBED_SCENARIO = """
name: what-testbed
duration_s: 15
total_units: 6
service_profiles: mine.yaml
testbed:
  name: wt
  link:
    capacity_mbit: 100
    uplink_mbit: 40
    conditions: [{trace: fade.csv, ue_group: phones}]
  slices:
    - {name: ai, sst: 1, sd: "000001", subnet: 10.45.0.0/24, guaranteed_mbit: 20, ceiling_mbit: 30}
    - {name: be, sst: 2, subnet: 10.46.0.0/24}
  ue_groups:
    - {name: phones, slice: ai, count: 3, k: 465B5CE8B199B49FAA5F0A2EE238A6BC,
       opc: E8ED289DEBA952E4283B54E88E6183CA, ambr_uplink_mbit: 5, five_qi: 80}
    - {name: noise, slice: be, count: 2}
services:
  - {name: imgcls, replicas: 2, policy: rule_v2}
clients:
  - {service: imgcls, ue_group: phones, rate: 30}
cross_traffic:
  - {slice: be, flows: 10, direction: uplink}
matrix:
  slicing: [on, off]
  capacity_mbit: [100, 50]
"""


def _section(md: Path) -> str:
    text = md.read_text()
    return text[text.index("## What was run"):text.index("\n## ", text.index("## What was run") + 1)]


def _row(section: str, first: str) -> list[str]:
    """The cells of the Markdown table row that starts with `first`."""
    line = next(line for line in section.splitlines() if line.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")]


@pytest.fixture
def testbed_run(tmp_path: Path) -> Path:
    """A testbed-engine run directory as the runner starts it: the manifest of the loaded
    scenario and a cell.json for each cell of its matrix (no records: the section needs none)."""
    (tmp_path / "mine.yaml").write_text("services:\n  imgcls: {slo_ms: 750, capacity: 3}\n")
    (tmp_path / "fade.csv").write_text("time_s,capacity_mbit,loss\n0,5,0\n20,2,0.01\n")
    (tmp_path / "what.yaml").write_text(TESTBED_SCENARIO)
    loaded = load_scenario(tmp_path / "what.yaml")
    run = tmp_path / "run"
    run.mkdir()
    write_manifest(run, scenario=loaded.scenario.model_dump(mode="json"),
                   testbed=loaded.testbed.model_dump(mode="json"), source=str(loaded.source),
                   base_dir=loaded.base_dir, profile="local", overrides={})
    for cell in expand(loaded.scenario, loaded.testbed):
        d = CellDir.create(run, cell.slug, 0)
        d.info.write_text(json.dumps({"slug": cell.slug, "label": cell.label,
                                      "params": cell.params, "rep": 0, "status": "ok",
                                      "services": ["imgcls"], "problems": []}))
    return run


def test_section_lists_the_slices_with_their_snssai_guarantees_and_subnets(testbed_run):
    md, _ = write_report(testbed_run)
    section = _section(md)
    assert _row(section, "ai")[:6] == ["ai", "1/000001", "internet", "10.45.0.0/24", "20", "30"]
    # no ceiling: the slice may take the link's rate (HTB's ceil is the link's)
    assert _row(section, "be") == ["be", "2 (no SD)", "internet", "10.46.0.0/24", "0",
                                   "none: the link's rate"]


def test_section_lists_the_ue_groups_and_the_link_per_cell(testbed_run):
    md, _ = write_report(testbed_run)
    section = _section(md)
    # the QoS in force: AMBR per direction (1000: the default, no limit) and 5QI with its level
    assert _row(section, "phones") == ["phones", "ai", "3", "5", "1000", "80 (68)"]
    assert _row(section, "noise") == ["noise", "be", "2", "1000", "1000", "9 (90)"]
    assert _row(section, "UE group phones") == ["UE group phones", "fade.csv",
                                                "0 s: 5 Mbit/s, loss 0; 20 s: 2 Mbit/s, loss 0.01"]
    # the matrix changes the link's capacity and slicing: the link table says so, and each cell
    # has its own values (uplink 40 stays: its own cap is below both capacities)
    link = _row(section, "bottleneck")
    assert link[1] == PER_CELL and link[2] == "40" and link[4] == PER_CELL
    assert _row(section, "cell") == ["cell", "capacity Mbit/s", "downlink Mbit/s", "slicing"]
    assert _row(section, "slicing=on, capacity_mbit=50") == ["slicing=on, capacity_mbit=50", "50",
                                                             "50", "on"]
    assert _row(section, "slicing=off, capacity_mbit=100")[1:] == ["100", "100", "off"]
    assert "ceilings do not apply" in section


def test_section_never_prints_subscriber_keys(testbed_run):
    md, page = write_report(testbed_run)
    for text in (md.read_text(), page.read_text()):
        assert "465B5CE8B199B49FAA5F0A2EE238A6BC" not in text.upper()
        assert "E8ED289DEBA952E4283B54E88E6183CA" not in text.upper()


def test_section_shows_a_users_own_service_profile_from_a_simulated_run(tmp_path):
    # a tiny sim scenario through the real runner; its profile file changes imgcls's SLO
    (tmp_path / "mine.yaml").write_text("services:\n  imgcls: {slo_ms: 321, queue_limit: 4}\n")
    (tmp_path / "own.yaml").write_text(
        "name: own-profile\nengine: sim\nduration_s: 300\nservice_profiles: mine.yaml\n"
        "services:\n  - {name: imgcls, policy: static, replicas: 2}\n"
        "clients:\n  - {service: imgcls, rate: 3}\n")
    result = run_scenario(load_scenario(tmp_path / "own.yaml"),
                          RunOptions(out_root=tmp_path / "runs", progress=False))
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["service_profiles"]["imgcls"]["slo_ms"] == 321
    md, _ = write_report(result.run_dir)
    row = _row(_section(md), "imgcls")
    header = _row(_section(md), "service")
    got = dict(zip(header, row, strict=True))
    assert got["SLO ms"] == "321" and got["queue limit"] == "4" and got["replicas"] == "2"
    assert got["proc. time ms"] == "60–80" and got["policy"] == "static"
    assert got["numbers from"] == "`mine.yaml`: queue_limit, slo_ms"
