"""The Python API as a user's script calls it: a scenario from a dict run on the simulator, its
rows, verdict and CSV, and a policy evaluated on a trace of one's own."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import testbed
from testbed.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _scenario(expect: list[str]) -> dict:
    return {
        "name": "api-asr", "engine": "sim", "service_profiles": str(EXAMPLES / "asr" / "asr.yaml"),
        "traces_dir": str(EXAMPLES / "asr"), "duration_s": 1800, "scaler_period_s": 30,
        "services": [{"name": "asr", "policy": "static"}],
        "clients": [{"service": "asr", "trace": "asr-day.txt"}],
        "matrix": {"policy": ["static", "rule_v2"]}, "expect": expect,
    }


def test_a_scenario_from_a_dict_runs_and_exports(tmp_path):
    scn = testbed.load_scenario(_scenario(
        ["slo_violation_rate[policy=rule_v2] < slo_violation_rate[policy=static]"]))
    result = testbed.run_scenario(scn, out=tmp_path, report=False)
    assert result.verdict == "PASS"
    assert {r["policy"] for r in result.rows} == {"static", "rule_v2"}
    assert result.to_csv(tmp_path / "rows.csv") == 2
    with (tmp_path / "rows.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["policy"] for r in rows] == [r["policy"] for r in result.rows]
    assert float(rows[0]["slo_violation_rate"]) == pytest.approx(result.rows[0]["slo_violation_rate"])


def test_a_failing_check_is_the_results_verdict(tmp_path):
    scn = testbed.load_scenario(_scenario(
        ["slo_violation_rate[policy=static] < slo_violation_rate[policy=rule_v2]"]))
    assert testbed.run_scenario(scn, out=tmp_path, report=False).verdict == "FAIL"


def test_evaluate_a_policy_object_and_a_name_on_a_trace_of_ones_own():
    class AlwaysUp:
        def act(self, observation, action_mask):
            return 3 if action_mask[3] else 2

    trace = EXAMPLES / "asr" / "asr-day.txt"
    profiles = EXAMPLES / "asr" / "asr.yaml"
    up = testbed.evaluate(AlwaysUp(), "asr", trace, profiles=profiles, max_steps=60)
    static = testbed.evaluate("static", "asr", trace, profiles=profiles, max_steps=60)
    assert up.instances > static.instances == 1
    assert up.slo_violation_rate < static.slo_violation_rate


def test_the_registry_through_the_api():
    assert {"chatbot", "imgcls", "tts"} <= set(testbed.services())
    with pytest.raises(ConfigError, match="unknown service"):
        testbed.evaluate("static", "nope", EXAMPLES / "asr" / "asr-day.txt")


def test_the_readmes_python_example_runs(tmp_path, monkeypatch, capsys):
    text = (ROOT / "README.md").read_text()
    block = text.split("## Your own service, policy and sweep", 1)[1].split("```python\n", 1)[1]
    code = block.split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    code = code.replace('out="runs"', f'out="{tmp_path}"').replace('"asr-rows.csv"', f'"{tmp_path}/rows.csv"')
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert out.startswith("PASS [('static', 0.69")
    assert (tmp_path / "rows.csv").read_text().count("\n") == 4
