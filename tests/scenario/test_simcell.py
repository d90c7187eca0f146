"""`engine: sim` cells run on the scenario's own profiles: its `service_profiles:` file sets every
service's SLO, timing and capacity in the simulator as it does on the testbed."""

from __future__ import annotations

from pathlib import Path

from testbed.config.yamlfile import load_yaml_file, validate
from testbed.scenario.load import parse_scenario
from testbed.scenario.simcell import run_sim_cell
from testbed.scenario.spec import Scenario

SCN = """\
name: slo
engine: sim
duration_s: 600
service_profiles: profiles.yaml
services:
  - {name: imgcls, policy: static}
clients:
  - {service: imgcls, rate: 10}
"""


def _violations(tmp_path, slo_ms: float) -> float:
    # imgcls serves one request at a time in 60-80 ms: at 10 req/s most take 60-200 ms
    (tmp_path / "profiles.yaml").write_text(f"services:\n  imgcls: {{slo_ms: {slo_ms}}}\n")
    (tmp_path / "slo.yaml").write_text(SCN)
    scn = validate(Scenario, load_yaml_file(tmp_path / "slo.yaml"))
    return run_sim_cell(scn, tmp_path, seed=0)["imgcls"]["slo_violation_rate"]


def test_the_scenarios_slo_decides_the_violations_in_the_simulator(tmp_path):
    tight, loose = _violations(tmp_path, 50), _violations(tmp_path, 2500)
    assert loose == 0.0  # nothing waits 2.5 s at a third of one replica's rate
    assert tight > 0.9  # no request is served in 50 ms (60 ms at the least)


def test_the_scenarios_rule_thresholds_drive_rule_v2_in_the_simulator(tmp_path):
    def instances(rule: str) -> float:
        (tmp_path / "profiles.yaml").write_text(f"services:\n  imgcls: {{rule: {rule}}}\n")
        (tmp_path / "slo.yaml").write_text(
            SCN.replace("policy: static}", "policy: rule_v2, replicas: 3}"))
        scn = validate(Scenario, load_yaml_file(tmp_path / "slo.yaml"))
        return run_sim_cell(scn, tmp_path, seed=0)["imgcls"]["instances"]

    # three replicas for a light load: Table 4.10's thresholds release two, thresholds of 0 none
    assert instances("{inst_util_low: 0.0, slo_low: 0.0}") == 3.0
    assert instances("{inst_util_low: 0.38}") < 1.5


SCENARIO = """
name: own-profile
engine: sim
duration_s: 600
scaler_period_s: 30
services:
  - {name: imgcls, policy: static}
clients:
  - {service: imgcls, rate: 4}
"""


def _imgcls_violations(tmp_path: Path, profiles: str | None) -> float:
    text = SCENARIO
    if profiles is not None:
        (tmp_path / "mine.yaml").write_text(profiles)
        text += "service_profiles: mine.yaml\n"
    scn = parse_scenario(text, "own-profile.yaml", tmp_path).scenario
    return run_sim_cell(scn, tmp_path, seed=0)["imgcls"]["slo_violation_rate"]


def test_the_simulator_judges_by_the_scenarios_service_profiles(tmp_path):
    packaged = _imgcls_violations(tmp_path, None)
    # imgcls takes 60-80 ms (Table 4.4): every request misses an SLO of 10 ms
    own = _imgcls_violations(tmp_path, "services:\n  imgcls: {slo_ms: 10}\n")
    assert packaged < 0.1 and own > 0.9
