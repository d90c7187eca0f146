"""A scenario cell through the simulator runs with the scenario's own service profiles."""

from __future__ import annotations

from pathlib import Path

from testbed.scenario.load import parse_scenario
from testbed.scenario.simcell import run_sim_cell

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
