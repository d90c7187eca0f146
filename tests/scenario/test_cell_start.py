"""A cell's load starts once everything that blocks the harness's event loop is done: a policy
that takes seconds to build (a DRL model loading torch) must not hold the first requests, which
the local balancer in that same loop would otherwise leave unanswered. What was built by then is
kept out of the garbage collector's full passes: with three PPO models loaded, one pass over the
process's 350,000 objects took 180-200 ms, and stalled that loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.pytest_plugin import BESIDE_GROUP
from tests.conftest import run_scenario_cli

SLOW_POLICY = """\
import gc
import time
from pathlib import Path

from testbed.scaler.actions import action_index


class Slow:
    \"\"\"Holds its replicas; building it takes 3 s, as loading a model does.\"\"\"

    def __init__(self, service="", total_units=8):
        time.sleep(3.0)

    def act(self, observation, action_mask):
        with open(Path(__file__).with_name("frozen.txt"), "a") as f:
            f.write(f"{gc.get_freeze_count()}\\n")
        return action_index(0)
"""

SCENARIO = """\
name: slow-start
duration_s: 6
scaler_period_s: 3
traces_dir: .
services:
  - {name: chatbot, replicas: 1, policy: "slowpol:Slow"}
clients:
  - {service: chatbot, ue_group: ai, trace: steady.txt}
"""


@pytest.mark.needs_root
@pytest.mark.timed
@pytest.mark.slow
@pytest.mark.xdist_group(BESIDE_GROUP)  # one such testbed at a time
def test_the_first_requests_are_answered_while_the_policy_is_built_before_them(tmp_path: Path):
    (tmp_path / "slowpol.py").write_text(SLOW_POLICY)
    (tmp_path / "steady.txt").write_text("6 12\n")
    scn = tmp_path / "slow.yaml"
    scn.write_text(SCENARIO)
    run, cell = run_scenario_cli(scn, tmp_path / "runs")
    assert run.returncode == 0, run.stdout + run.stderr
    sent = [json.loads(line) for line in (cell / "requests" / "chatbot-ai-0.jsonl").read_text().split()]
    first = min(sent, key=lambda r: r["sent"])
    # 140-420 ms of processing: a first answer after the 3 s build would be the loop's stall
    assert first["error"] is None and first["latency_ms"] < 1500, first
    info = json.loads((cell / "cell.json").read_text())
    assert abs(info["load_started"] - first["sent"]) < 1.5  # the first period starts with the load
    # at each decision, what the cell held before its load (here the policy, the cluster, the
    # imports: tens of thousands of objects) is frozen
    frozen = [int(n) for n in (tmp_path / "frozen.txt").read_text().split()]
    assert frozen and min(frozen) > 10_000, frozen
