from __future__ import annotations

from pathlib import Path

import pytest

from testbed.errors import ConfigError
from testbed.judge.outcome import evaluate
from testbed.judge.syntax import ExpectSyntaxError, parse
from testbed.scenario.load import parse_scenario
from testbed.scenario.matrix import expand

BASE = """\
name: t
duration_s: 30
services:
  - name: imgcls
    replicas: 6
  - name: tts
    replicas: 2
clients:
  - service: imgcls
    ue_group: ai
    rate: 30
cross_traffic:
  - slice: be
    flows: 10
matrix:
  iperf_flows: [10, 40]
  slicing: [on, off]
expect:
  - slo_violation_rate[service=imgcls, slicing=on, iperf_flows=40] <= 0.01 effect 0.02
"""


def load(text: str, tmp_path: Path | None = None):
    return parse_scenario(text, "scn.yaml", tmp_path)


def errors(text: str, tmp_path: Path | None = None) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load(text, tmp_path)
    return [str(p) for p in exc.value.problems]


def test_matrix_expands_in_order_and_sets_fields():
    loaded = load(BASE)
    cells = expand(loaded.scenario, loaded.testbed)
    assert [c.label for c in cells] == ["iperf_flows=10, slicing=on", "iperf_flows=10, slicing=off",
                                        "iperf_flows=40, slicing=on", "iperf_flows=40, slicing=off"]
    assert cells[2].scenario.cross_traffic[0].flows == 40
    assert cells[3].testbed.link.slicing is False and cells[2].testbed.link.slicing is True
    assert cells[0].slug == "00-iperf_flows-10_slicing-on"
    # the base scenario is untouched
    assert loaded.scenario.cross_traffic[0].flows == 10


def test_indexed_matrix_paths():
    loaded = load(BASE.replace("  iperf_flows: [10, 40]\n  slicing: [on, off]\n",
                               "  services[1].policy: [static, rule_v2]\n"
                               "  testbed.link.queue_packets: [50]\n")
                  .replace("expect:\n  - slo_violation_rate[service=imgcls, slicing=on, "
                           "iperf_flows=40] <= 0.01 effect 0.02\n", ""))
    cells = expand(loaded.scenario, loaded.testbed)
    assert [c.scenario.services[1].policy for c in cells] == ["static", "rule_v2"]
    assert all(c.testbed.link.queue_packets == 50 for c in cells)


def test_matrix_key_that_no_field_uses():
    ps = errors(BASE.replace("slicing: [on, off]", "colour: [red]"))
    assert any(p.startswith("scn.yaml:17: matrix.colour:") for p in ps)


def test_matrix_value_of_wrong_type_is_caught_at_load_time():
    ps = errors(BASE.replace("iperf_flows: [10, 40]", "iperf_flows: [10, many]"))
    assert any(p.startswith("scn.yaml:16: matrix.iperf_flows[1]: value 'many' does not fit")
               for p in ps)
    ps = errors(BASE.replace("iperf_flows: [10, 40]", "iperf_flows: [10, 400]"))
    assert any("matrix.iperf_flows[1]" in p and "128" in p for p in ps)


def test_unknown_names_are_errors_with_lines():
    ps = errors(BASE.replace("ue_group: ai", "ue_group: nope").replace("slice: be", "slice: x"))
    assert any(p.startswith("scn.yaml:10: clients[0].ue_group: no UE group 'nope'") for p in ps)
    assert any(p.startswith("scn.yaml:13: cross_traffic[0].slice: no slice 'x'") for p in ps)


def test_unknown_service_and_policy():
    ps = errors(BASE.replace("name: tts", "name: video"))
    assert any("services[1].name" in p for p in ps)
    ps = errors(BASE.replace("    replicas: 2", "    replicas: 2\n    policy: magic"))
    assert any("services[1].policy" in p for p in ps)


def test_client_of_a_service_not_listed():
    ps = errors(BASE.replace("  - service: imgcls\n    ue_group", "  - service: chatbot\n    ue_group"))
    assert any("clients[0].service: no service 'chatbot'" in p for p in ps)


def test_expect_over_unknown_metric_or_selector():
    ps = errors(BASE.replace("slo_violation_rate[service", "happiness[service"))
    assert any(p.startswith("scn.yaml:19: expect[0]: unknown metric 'happiness'") for p in ps)
    ps = errors(BASE.replace("slicing=on, iperf", "colour=on, iperf"))
    assert any("unknown selector 'colour'" in p for p in ps)


def test_missing_model_and_trace_files(tmp_path: Path):
    text = BASE.replace("    replicas: 2", "    replicas: 2\n    policy: ppo\n    model: m.zip")
    assert any("model file 'm.zip' not found" in p for p in errors(text, tmp_path))
    text = BASE.replace("    rate: 30", "    trace: day.txt")
    assert any("trace file" in p and "not found" in p for p in errors(text, tmp_path))
    assert any("policy 'ppo' needs `model:`" in p
               for p in errors(BASE.replace("    replicas: 2", "    replicas: 2\n    policy: ppo")))


def test_trace_xor_rate():
    ps = errors(BASE.replace("    rate: 30", "    rate: 30\n    trace: x.txt"))
    assert any("exactly one of" in p for p in ps)


def test_initial_replicas_must_fit_units():
    ps = errors(BASE.replace("duration_s: 30", "duration_s: 30\ntotal_units: 4"))
    assert any("total_units: cell iperf_flows=10, slicing=on: initial replicas need 8 units"
               in p for p in ps)


ROWS = [
    {"service": "imgcls", "slicing": True, "iperf_flows": 40, "slo_violation_rate": 0.004,
     "mean_latency_ms": 110.0, "rep": 0},
    {"service": "imgcls", "slicing": True, "iperf_flows": 40, "slo_violation_rate": 0.006,
     "mean_latency_ms": 130.0, "rep": 1},
    {"service": "imgcls", "slicing": False, "iperf_flows": 40, "slo_violation_rate": 0.3,
     "mean_latency_ms": 480.0, "rep": 0},
]


@pytest.mark.parametrize("text,passed,left", [
    ("slo_violation_rate[service=imgcls, slicing=on, iperf_flows=40] <= 0.01", True, 0.005),
    ("slo_violation_rate[service=imgcls, slicing=true, iperf_flows=40.0] < 0.005", False, 0.005),
    ("mean_latency_ms[slicing=off] / mean_latency_ms[slicing=on] >= 3", True, 4.0),
    ("(mean_latency_ms[slicing=off] - mean_latency_ms[slicing=on]) * 2 == 720", True, 720.0),
    ("mean_latency_ms[slicing=on, rep=1] > 125", True, 130.0),
])
def test_expect_evaluation(text, passed, left):
    o = evaluate(parse(text), ROWS)
    assert o.passed is passed
    assert o.left == pytest.approx(left)


def test_expect_without_matching_rows_fails_with_reason():
    o = evaluate(parse("slo_violation_rate[service=tts] < 1"), ROWS)
    assert not o.passed and "no result matches" in o.detail


@pytest.mark.parametrize("text", ["slo_violation_rate < ", "slo_violation_rate", "a[b] < 1 < 2",
                                  "a[b c] < 1", "x $ 3"])
def test_expect_syntax_errors(text):
    with pytest.raises(ExpectSyntaxError):
        parse(text)


def test_share_policies_run_on_the_testbed_engine_and_pipelines_name_listed_services():
    fa2 = load(BASE.replace("    replicas: 2", "    replicas: 2\n    policy: fa2"))
    assert fa2.scenario.services[1].policy == "fa2"
    ps = errors(BASE.replace("    replicas: 2", "    replicas: 2\n    policy: fa2") + "compare_sim: true\n")
    # checked per cell (a matrix may sweep the policy in): the first cell names it
    assert any(p.startswith("scn.yaml:8: services[1].policy: ") and ": fa2 sets shares" in p
               for p in ps), ps
    ps = errors(BASE + "pipelines:\n  - {services: [imgcls, chatbot], sla_ms: 3000}\n")
    assert any("pipelines[0].services[1]" in p and "'chatbot'" in p for p in ps)
    ps = errors(BASE + "pipelines:\n  - {services: [imgcls], sla_ms: 0}\n")
    assert any("pipelines[0].sla_ms" in p for p in ps)


def test_the_policies_ci_scenario_loads():
    root = Path(__file__).resolve().parents[2]
    from testbed.scenario.load import load_scenario

    scn = load_scenario(root / "scenarios" / "policies-ci.yaml")
    assert [s.name for s in scn.scenario.services] == ["chatbot", "imgcls", "tts"]
    assert scn.scenario.matrix["policy"] == ["fa2", "rule_v2", "inss", "ddpg"]
    assert scn.scenario.interference is True


SHARE = """\
name: s
duration_s: 30
services:
  - {name: tts, policy: inss}
  - {name: chatbot, policy: inss}
  - {name: imgcls, policy: inss}
clients:
  - {service: imgcls, ue_group: ai, rate: 3}
"""


def test_inss_and_ddpg_load_with_the_shipped_models_and_interference_is_opt_in():
    from testbed.scaler.share import default_model, read_share_meta

    scn = load(SHARE).scenario
    assert [s.policy for s in scn.services] == ["inss"] * 3 and scn.interference is False
    assert read_share_meta(default_model("inss")).kind == "inss"
    both = load(SHARE.replace("policy: inss", "policy: static") + "interference: true\n"
                "matrix:\n  policy: [inss, ddpg]\n")
    assert both.scenario.interference is True
    assert [c.label for c in expand(both.scenario, both.testbed)] == ["policy=inss", "policy=ddpg"]


def test_the_runner_builds_one_actor_for_the_services_it_was_trained_for(tmp_path: Path):
    """In the model's input order whatever the scenario's order; the cell records the model."""
    from rich.console import Console

    from testbed.scaler.share import SharePolicy
    from testbed.scenario.cell import CellRunner
    from testbed.scenario.cellplan import compile_cell
    from testbed.scenario.live import LiveView
    from testbed.scenario.rundir import CellDir

    loaded = load(SHARE.replace("policy: inss", "policy: ddpg"), tmp_path)
    (cell,) = expand(loaded.scenario, loaded.testbed)
    runner = CellRunner(compile_cell(cell, tmp_path), 0, CellDir.create(tmp_path, cell.slug, 0),
                        LiveView(Console(file=None), [cell], 1, enabled=False))
    policies = runner._policies()
    assert list(policies) == ["tts", "chatbot", "imgcls"]
    (actor,) = {id(p): p for p in policies.values()}.values()
    assert isinstance(actor, SharePolicy) and actor.name == "ddpg"
    assert actor.mapper.services == ["chatbot", "imgcls", "tts"]
    assert runner.info["models"]["ddpg"].endswith("models/ddpg.zip")


def test_the_cell_judges_slo_by_the_scenarios_own_profiles(tmp_path: Path):
    """A scenario's service_profiles changing an SLO: the cell's results use that SLO, as its
    scaler and balancer do, not the packaged one."""
    from rich.console import Console

    from testbed.scenario.cell import CellRunner
    from testbed.scenario.cellplan import compile_cell
    from testbed.scenario.live import LiveView
    from testbed.scenario.rundir import CellDir

    (tmp_path / "p.yaml").write_text("services:\n  imgcls: {slo_ms: 750}\n")
    loaded = load("name: s\nduration_s: 30\nservice_profiles: p.yaml\n"
                  "services:\n  - {name: imgcls}\n", tmp_path)
    (cell,) = expand(loaded.scenario, loaded.testbed)
    runner = CellRunner(compile_cell(cell, tmp_path), 0, CellDir.create(tmp_path, cell.slug, 0),
                        LiveView(Console(file=None), [cell], 1, enabled=False))
    assert runner.info["slo_ms"]["imgcls"] == 500.0  # before the profiles are read
    runner.profiles()
    assert runner.info["slo_ms"]["imgcls"] == 750.0 and runner.info["slo_ms"]["tts"] == 2500.0


def test_a_clients_connections_reach_its_load_job():
    """`connections: per-request` (the dissertation's client) gives the cell's load client
    --new-connections; keep-alive is the default; anything else is refused with its line."""
    from testbed.scenario.cell import load_job

    scenarios = Path(__file__).resolve().parents[2] / "scenarios"
    text = (scenarios / "slicing-ci.yaml").read_text()
    text = text.replace("  - {service: imgcls, ue_group: ai, rate: 30}",
                        "  - {service: imgcls, ue_group: ai, rate: 30, connections: per-request}")
    scn = parse_scenario(text, "s.yaml", scenarios).scenario
    jobs = {c.service: load_job(scn, c, i, 0, scenarios) for i, c in enumerate(scn.clients)}
    assert jobs["imgcls"].new_connections and "--new-connections" in jobs["imgcls"].options()
    assert not jobs["tts"].new_connections and "--new-connections" not in jobs["tts"].options()
    with pytest.raises(ConfigError) as err:
        parse_scenario(text.replace("per-request}", "pooled}"), "s.yaml", scenarios)
    assert "s.yaml:" in str(err.value) and "connections" in str(err.value)
