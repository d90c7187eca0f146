"""ppo-testbed-ci's two checks on the rows its runs produced at the shipped size (issue 55): the
healthy runs of 2026-12-02 pass, and each planted regression (bench/plants/sitecustomize.py, run
on the local testbed with `TESTBED_PLANT`) fails the line it was planted for, in the judge as a
testbed run reads them. The plants themselves are checked here on a stand-in policy class (no
torch), so that what they plant is what the scenario's comment says."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.cli import main
from testbed.judge.outcome import FAIL, PASS, evaluate_all
from testbed.scaler.actions import action_mask
from testbed.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "ppo-testbed-ci.yaml"
N = {"chatbot": 414, "imgcls": 4996, "tts": 1662}  # requests per cell, every run


def _row(policy: str, service: str, late: int, replicas: float, batch_se: float = 0.0) -> dict:
    n = N[service]
    return {"policy": policy, "service": service, "cell": f"cell-{policy}", "rep": 0, "status": "ok",
            "requests": n, "ok": n, "violations": late, "slo_violation_rate": late / n,
            "slo_violation_batch_se": batch_se, "mean_replicas": replicas}


def _rule_v2() -> list[dict]:
    return [_row("rule_v2", "chatbot", 0, 1.0), _row("rule_v2", "imgcls", 0, 2.0),
            _row("rule_v2", "tts", 0, 4.0)]


# TTS's figures under the agent (late requests, mean replicas; rule v2: none late, 4.00 in all)
RUNS = {
    "healthy (three runs: 4, 3, 2, 3 and held)": [
        _row("ppo", "chatbot", 0, 1.0), _row("ppo", "imgcls", 0, 2.0), _row("ppo", "tts", 0, 2.9305)],
    "ppo-holds (the agent never acts)": [
        _row("ppo", "chatbot", 0, 1.0), _row("ppo", "imgcls", 0, 2.0), _row("ppo", "tts", 0, 4.0)],
    "ppo-scales-down (releases all the mask allows)": [
        _row("ppo", "chatbot", 0, 1.0), _row("ppo", "imgcls", 3922, 1.0987, 0.0777),
        _row("ppo", "tts", 1267, 1.3947, 0.0971)],
}
EXPECTED = {  # the verdict of each line, in the scenario's order
    "healthy (three runs: 4, 3, 2, 3 and held)": [PASS, PASS],
    "ppo-holds (the agent never acts)": [FAIL, PASS],
    "ppo-scales-down (releases all the mask allows)": [PASS, FAIL],
}


@pytest.mark.parametrize("case", list(RUNS))
def test_each_run_gets_the_verdicts_it_got_on_the_testbed(case):
    expect = load_scenario(SCENARIO).scenario.expect
    assert [o.verdict for o in evaluate_all(expect, RUNS[case] + _rule_v2())] == EXPECTED[case]


@pytest.mark.parametrize("case", list(RUNS))
def test_testbed_judge_exits_zero_only_on_the_healthy_run(tmp_path, capsys, case):
    (tmp_path / "results.json").write_text(json.dumps(
        {"rows": RUNS[case] + _rule_v2(), "expect": [], "interrupted": False, "problems": []}))
    code = main(["judge", str(tmp_path), "--scenario", str(SCENARIO)])
    assert (code == 0) == case.startswith("healthy"), capsys.readouterr().out


def _plants() -> dict:
    spec = importlib.util.spec_from_file_location("plants", ROOT / "bench" / "plants" / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # TESTBED_PLANT unset: defines the plants, patches nothing
    return module.PLANTS


@pytest.mark.parametrize(("plant", "instances", "cooldown", "delta"), [
    ("ppo-holds", 4, 0, 0), ("ppo-holds", 1, 0, 0),
    ("ppo-scales-down", 4, 0, -2), ("ppo-scales-down", 2, 0, -1), ("ppo-scales-down", 1, 0, 0),
    ("ppo-scales-down", 4, 3, 0),  # the cooldown after a scale-up blocks it, as any policy
])
def test_the_ppo_plants_act_as_their_names_say(monkeypatch, plant, instances, cooldown, delta):
    monkeypatch.delenv("TESTBED_PLANT", raising=False)
    target, patch = _plants()[plant]
    assert target == "testbed.scaler.ppo"

    class Agent:
        def act(self, observation, action_mask):
            raise AssertionError("the plant replaces the agent's act")

    module = SimpleNamespace(MaskablePpoPolicy=Agent)
    patch(module)
    mask = action_mask(instances, free_units=1, units_per_instance=1, cooldown=cooldown)
    assert Agent().act(None, mask) - 2 == delta
