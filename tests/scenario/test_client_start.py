"""At a time scale a cell's clients begin one schedule together (`testbed load --start-at`), and
the cell's clock is that moment: each started when it was ready, imgcls's schedule began 0.25 s
after the chatbot's (4 s of scenario time at time scale 16), so the scaler's windows saw its load
shifted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.pytest_plugin import BESIDE_GROUP
from tests.conftest import run_scenario_cli

SCENARIO = """\
name: together
duration_s: 20
time_scale: 4
replica_work: sleep
scaler_period_s: 10
services:
  - {name: chatbot, replicas: 1}
  - {name: imgcls, replicas: 1}
  - {name: tts, replicas: 1}
clients:
  - {service: chatbot, ue_group: ai, rate: 1}
  - {service: imgcls, ue_group: ai, rate: 4}
  - {service: tts, ue_group: ai, rate: 1}
"""


@pytest.mark.needs_root
@pytest.mark.timed
@pytest.mark.xdist_group(BESIDE_GROUP)  # one such testbed at a time
def test_a_time_scaled_cells_clients_begin_their_schedules_at_one_moment(tmp_path: Path):
    scn = tmp_path / "together.yaml"
    scn.write_text(SCENARIO)
    run, cell = run_scenario_cli(scn, tmp_path / "runs")
    assert run.returncode == 0, run.stdout + run.stderr
    info = json.loads((cell / "cell.json").read_text())
    firsts = {}
    for path in (cell / "requests").glob("*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().split()]
        firsts[rows[0]["service"]] = min(r["scheduled"] for r in rows)
    assert set(firsts) == {"chatbot", "imgcls", "tts"}
    # every constant schedule's first request is at its zero: the one moment, the cell's clock
    assert max(firsts.values()) - min(firsts.values()) < 0.002, firsts
    assert abs(firsts["imgcls"] - info["load_started"]) < 0.002, (firsts, info["load_started"])
