"""A UE group's load leaves from each of its UEs in turn (`testbed load --source` repeated), so
that per-UE AMBR leaves and per-UE series carry their share: the client bound everything to the
group's first UE, and `net.jsonl` showed the second idle."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from testbed.pytest_plugin import BESIDE_GROUP
from tests.conftest import run_scenario_cli

SCENARIO = """\
name: spread
duration_s: 12
replica_work: sleep
scaler_period_s: 6
testbed:
  name: spread
  link: {capacity_mbit: 100}
  slices:
    - {name: ai, sst: 1, sd: "000001", subnet: 10.45.0.0/24, guaranteed_mbit: 20}
  ue_groups:
    # an AMBR below the link: each UE has a leaf of its own, sampled into net.jsonl
    - {name: cam, slice: ai, count: 2, ambr_uplink_mbit: 50, ambr_downlink_mbit: 50}
services:
  - {name: imgcls, replicas: 1}
clients:
  - {service: imgcls, ue_group: cam, rate: 5}
"""


@pytest.mark.needs_root
@pytest.mark.xdist_group(BESIDE_GROUP)  # one such testbed at a time
def test_a_groups_requests_leave_from_each_of_its_ues_and_their_leaves_carry_them(tmp_path: Path):
    scn = tmp_path / "spread.yaml"
    scn.write_text(SCENARIO)
    run, cell = run_scenario_cli(scn, tmp_path / "runs")
    assert run.returncode == 0, run.stdout + run.stderr
    net = [json.loads(line) for line in (cell / "net.jsonl").read_text().split()]
    sent = {r["ue"]: r["bytes"] for r in net if r["direction"] == "uplink" and r["ue"]}
    # 30 imgcls uploads of about 48 kB each from each UE, through its own leaf
    assert set(sent) == {"10.45.0.2", "10.45.0.3"} and min(sent.values()) > 500_000, sent
    [path] = (cell / "requests").glob("*.jsonl")
    records = [json.loads(line) for line in path.read_text().split()]
    by_ue = Counter(r.get("ue") for r in records)
    assert set(by_ue) == {"10.45.0.2", "10.45.0.3"}, by_ue
    assert abs(by_ue["10.45.0.2"] - by_ue["10.45.0.3"]) <= 1, by_ue  # in turn
