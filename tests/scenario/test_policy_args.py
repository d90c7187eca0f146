"""A scenario passes its policy's own arguments (`policy_args:`): a class's `__init__` keywords,
the rules' thresholds, fa2's knobs; a key the policy does not take is one error at its line, and
`policy_args` sweep by dotted path like any field."""

from __future__ import annotations

from pathlib import Path

import pytest

import testbed
from testbed.errors import ConfigError
from testbed.scenario.load import parse_scenario

EXAMPLES = Path(__file__).parents[2] / "examples"
SCENARIO = """\
name: args
engine: sim
service_profiles: asr/asr.yaml
traces_dir: asr
duration_s: 3600
scaler_period_s: 30
total_units: 8
services:
  - {name: asr, policy: "policies.queue_policy:QueuePolicy", policy_args: {high: 2.0}}
clients:
  - {service: asr, trace: asr-day.txt}
"""


def _rows(text: str, tmp_path: Path) -> list[dict]:
    result = testbed.run_scenario(parse_scenario(text, "args.yaml", EXAMPLES), out=tmp_path)
    return result.rows


def test_a_class_takes_its_keywords_and_a_sweep_varies_them(tmp_path: Path):
    text = SCENARIO + "matrix:\n  services.asr.policy_args.high: [2.0, 1000.0]\n"
    rows = {r["services.asr.policy_args.high"]: r for r in _rows(text, tmp_path)}
    # never more than 1000 waiting per replica: the policy never scales out, one replica throughout
    assert rows[1000.0]["mean_replicas"] == 1.0
    assert rows[2.0]["mean_replicas"] > 1.2
    assert rows[2.0]["slo_violation_rate"] < rows[1000.0]["slo_violation_rate"]


def test_the_rules_take_their_thresholds(tmp_path: Path):
    text = SCENARIO.replace('policy: "policies.queue_policy:QueuePolicy", policy_args: {high: 2.0}',
                            "policy: rule_v2, policy_args: {slo_high: 1.0, inst_util_high: 1.0}")
    never = _rows(text, tmp_path / "never")[0]
    plain = _rows(text.replace(", policy_args: {slo_high: 1.0, inst_util_high: 1.0}", ""),
                  tmp_path / "plain")[0]
    assert never["mean_replicas"] == 1.0 and plain["mean_replicas"] > 1.2


@pytest.mark.parametrize("policy, args, says", [
    ('"policies.queue_policy:QueuePolicy"', "{hihg: 2.0}",
     "args.yaml:9: services[0].policy_args: policies.queue_policy:QueuePolicy takes no argument "
     "'hihg' (it takes: high, low)"),
    ("rule_v2", "{slo_hgh: 0.1}", "args.yaml:9: services[0].policy_args: rule_v2 takes no "
                                  "argument 'slo_hgh' (it takes: inst_util_high_2"),
    ("static", "{high: 1}", "args.yaml:9: services[0].policy_args: static takes no argument "
                            "'high' (it takes: none)"),
])
def test_an_argument_the_policy_does_not_take_is_one_error_at_its_line(policy: str, args: str,
                                                                       says: str):
    text = SCENARIO.replace('"policies.queue_policy:QueuePolicy", policy_args: {high: 2.0}',
                            f"{policy}, policy_args: {args}")
    with pytest.raises(ConfigError) as exc:
        parse_scenario(text, "args.yaml", EXAMPLES)
    assert str(exc.value).startswith(says), str(exc.value)


def test_sim_rows_and_expect_have_the_95th_percentile(tmp_path: Path):
    """A sim cell's rows carry every served request's p50/p95/p99 (a histogram's), and `expect:`
    reads p95_latency_ms: one replica's 95th percentile is the queue's full wait (over 2 s), the
    queue policy's lower."""
    text = (SCENARIO + "matrix:\n  services.asr.policy_args.high: [2.0, 1000.0]\nexpect:\n"
            "  - p95_latency_ms[services.asr.policy_args.high=1000.0] > 2000\n"
            "  - p95_latency_ms[services.asr.policy_args.high=2.0] < "
            "p95_latency_ms[services.asr.policy_args.high=1000.0]\n")
    result = testbed.run_scenario(parse_scenario(text, "p95.yaml", EXAMPLES), out=tmp_path)
    rows = {r["services.asr.policy_args.high"]: r for r in result.rows}
    assert result.verdict == "PASS", [o.text for o in result.outcomes]
    for r in rows.values():
        assert r["p50_latency_ms"] < r["p95_latency_ms"] < r["p99_latency_ms"]
