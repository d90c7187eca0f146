"""A scenario changes its services' profile fields (`profiles:`), over its profile file and the
registry's, and a matrix sweeps them by dotted path (`profiles.SERVICE.FIELD`) like any field; a
path or a value that does not fit is one error at its line."""

from __future__ import annotations

from pathlib import Path

import pytest

import testbed
from testbed.errors import ConfigError
from testbed.pytest_plugin import BESIDE_GROUP
from testbed.scenario.load import parse_scenario
from testbed.scenario.profiles import scenario_profiles

EXAMPLES = Path(__file__).parents[2] / "examples"
SCENARIO = """\
name: xr-sweep
engine: sim
service_profiles: xr/xrpose.yaml
traces_dir: xr
duration_s: 86400
total_units: 8
services:
  - {name: xrpose, policy: static}
clients:
  - {service: xrpose, trace: xr-day.txt, ratio: 4}
"""


def test_a_sweep_over_a_profile_field_runs_each_value(tmp_path: Path):
    text = SCENARIO + "matrix:\n  profiles.xrpose.capacity: [1, 4]\n"
    rows = {r["profiles.xrpose.capacity"]: r for r in
            testbed.run_scenario(parse_scenario(text, "sweep.yaml", EXAMPLES), out=tmp_path).rows}
    # four frames at a time hold the evening's 149.6 frames/s on one replica; one at a time
    # (40 frames/s) does not
    assert rows[4]["slo_violation_rate"] < 0.01 and rows[1]["slo_violation_rate"] > 0.3


def test_a_change_keeps_the_other_fields_of_its_block():
    loaded = parse_scenario(SCENARIO + "profiles:\n  xrpose: {slo_ms: 100, rule: {slo_high: 0.2}}\n",
                            "changed.yaml", EXAMPLES)
    p = scenario_profiles(loaded.scenario, EXAMPLES)["xrpose"]
    assert (p.slo_ms, p.capacity, p.rule.slo_high, p.rule.inst_util_high) == (100, 4, 0.2, 0.90)
    assert "slo_ms" not in p.sources  # a changed number loses the source the file gave it


@pytest.mark.parametrize("tail, says", [
    ("matrix:\n  profiles.xrpose.capcity: [1, 4]\n",
     "sweep.yaml:12: matrix.profiles.xrpose.capcity: 'capcity' is no field of xrpose's profile"),
    ("matrix:\n  profiles.chatbot.capacity: [1]\n",
     "sweep.yaml:12: matrix.profiles.chatbot.capacity: 'chatbot' is not a service of this scenario"),
    ("matrix:\n  profiles.xrpose.capacity: [0, 4]\n",
     "sweep.yaml:12: matrix.profiles.xrpose.capacity: cell profiles.xrpose.capacity=0: "
     "profiles.xrpose.capacity: Input should be greater than or equal to 1"),
    ("profiles:\n  xrpose: {slo_ms: -5}\n",
     "sweep.yaml:11: profiles: profiles.xrpose.slo_ms: Input should be greater than 0"),
])
def test_a_profile_path_or_value_that_does_not_fit_is_one_error_at_its_line(tail: str, says: str):
    with pytest.raises(ConfigError) as exc:
        parse_scenario(SCENARIO + tail, "sweep.yaml", EXAMPLES)
    assert str(exc.value).startswith(says), str(exc.value)


LOCAL = """\
name: asr-changed
service_profiles: {profiles}
duration_s: 8
scaler_period_s: 4
total_units: 4
replica_work: sleep
profiles:
  asr: {{slo_ms: 1234}}
services:
  - {{name: asr, replicas: 1}}
clients:
  - {{service: asr, ue_group: ai, rate: 2}}
"""


@pytest.mark.needs_root
@pytest.mark.xdist_group(BESIDE_GROUP)  # one such testbed at a time
def test_a_local_cells_clients_and_replicas_run_with_the_changed_profile(tmp_path: Path):
    """The clients read the changed profile from a file of the cell's (their own `client:`
    module, asr_service.py, still imported), the replicas and the results take it too."""
    import json

    from tests.conftest import run_scenario_cli

    scn = tmp_path / "asr-changed.yaml"
    scn.write_text(LOCAL.format(profiles=EXAMPLES / "asr" / "asr.yaml"))
    run, cell = run_scenario_cli(scn, tmp_path / "runs")
    assert run.returncode == 0, run.stdout + run.stderr
    info = json.loads((cell / "cell.json").read_text())
    assert info["slo_ms"]["asr"] == 1234 and info["profiles"]["asr"]["slo_ms"] == 1234
    written = (cell / "profiles.yaml").read_text()
    assert "slo_ms: 1234" in written and "client: asr_service:AsrClient" in written
    records = [json.loads(line) for p in (cell / "requests").glob("*.jsonl")
               for line in p.read_text().split()]
    assert len(records) >= 14 and all(r["error"] is None for r in records), records[:3]
