"""Every seed policy on every engine, on a built-in service and on a user's: it runs, or the
scenario is refused when it loads, in one line naming the file, line and field. Never a failure
after cells have run, never a traceback (issue 43).

The simulator's cells run (a few minutes of scenario time each). The local testbed and the lab
are checked up to their first cell without root or a lab: the scenario loads, the cell's policies
are built as the cell builds them (`CellRunner._policies`), and on the lab the manifests are
generated as `LabProfile` does before it touches anything. One real local cell of fa2 on a
user's service runs where root and namespaces are (needs_root)."""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from testbed.errors import ConfigError
from testbed.profiles import load_profiles
from testbed.pytest_plugin import BESIDE_GROUP
from testbed.scaler import registry
from testbed.scaler.factory import PolicyChoice, build_policies
from testbed.scenario.lab import LabProfile
from testbed.scenario.load import load_scenario
from testbed.scenario.runner import RunOptions, run_scenario

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [n for n, e in registry.entries().items() if e.origin == "built in"]
# a user's service, without a GPU curve, and the same with the built-in one by name
OWN = """\
services:
  vidan:
    capacity: 1
    queue_limit: 11
    proc_time_ms: [90, 140]
    startup_ms: 8000
    slo_ms: 800
    request: {upload_bytes: 600000, response_bytes: 2000}
    deploy: {image: "ghcr.io/example/vidan:1.0", port: 9000, gpu: true}
"""
SERVICES = {"imgcls": None, "vidan": OWN, "vidan-gpu": OWN.replace(
    "    slo_ms: 800\n", "    slo_ms: 800\n    gpu: default\n")}
LOCATED = re.compile(r"^[^\s:]+\.yaml:\d+: [\w.\[\]]+: ")  # file:line: field: message


def scenario(folder: Path, engine: str, service: str, policy: str) -> Path:
    """A scenario file in `folder` of `service` scaled by `policy` on `engine`, the policy swept
    in the matrix beside static (where a late failure hid: issue 43's fa2)."""
    name = service.split("-")[0]
    lines = [f"name: m-{engine}", f"engine: {'sim' if engine == 'sim' else 'testbed'}",
             "duration_s: 300", "scaler_period_s: 30"]
    if SERVICES[service]:
        (folder / "own.yaml").write_text(SERVICES[service])
        lines.append("service_profiles: own.yaml")
    model = f", model: {ROOT / 'models' / 'imgcls.zip'}" if policy == "ppo" else ""
    group = "" if engine == "sim" else "ue_group: ai, "
    lines += ["services:", f"  - {{name: {name}, policy: static{model}}}",
              "clients:", f"  - {{service: {name}, {group}rate: 4}}",
              "matrix:", f"  policy: [static, {policy}]"]
    path = folder / "scn.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def refused_in_one_line(exc: ConfigError) -> str:
    text = str(exc)
    assert "\n" not in text and LOCATED.match(text), text
    return text


@pytest.mark.parametrize("service", list(SERVICES))
@pytest.mark.parametrize("engine", ["sim", "local", "lab"])
@pytest.mark.parametrize("policy", SEEDS)
def test_a_policy_runs_or_is_refused_at_load(tmp_path: Path, policy: str, engine: str,
                                            service: str):
    path = scenario(tmp_path, engine, service, policy)
    entry = registry.resolve(policy)
    try:
        loaded = load_scenario(path)
    except ConfigError as exc:
        text = refused_in_one_line(exc)
        # only what cannot run is refused: share planners on the simulator or on a service
        # without a GPU curve, trained actors on services they were not trained for
        if policy == "ppo":  # the agent given is imgcls's
            assert service != "imgcls" and "services[0].model: " in text, text
            return
        assert entry.sets_shares, text
        assert engine == "sim" or service != "imgcls" or entry.needs_model, text
        assert "matrix.policy" in text
        return
    assert not (entry.sets_shares and engine == "sim")
    if engine == "sim":
        result = run_scenario(loaded, RunOptions(out_root=tmp_path / "runs", progress=False,
                                                 console=Console(file=StringIO())))
        assert not result.problems and len(result.rows) == 2
        assert {r["policy"] for r in result.rows} == {"static", policy}
        return
    for cell in loaded_cells(loaded):
        scn = cell.scenario
        own = loaded.base_dir / scn.service_profiles if scn.service_profiles else None
        profiles = load_profiles(own)
        built = build_policies([PolicyChoice(s.name, s.policy, Path(s.model) if s.model else None)
                                for s in scn.services],
                               profiles, total_units=scn.total_units, seed=0,
                               base_dir=loaded.base_dir)
        assert set(built.policies) == {s.name for s in scn.services}
        if engine == "lab":
            services, manifests = LabProfile._services(scn, loaded.base_dir, tmp_path / "run",
                                                       "testbed")
            assert [s.name for s in services] == [s.name for s in scn.services]
            assert all(p.is_file() for p in manifests.values())


def loaded_cells(loaded):
    from testbed.scenario.matrix import expand

    return expand(loaded.scenario, loaded.testbed)


def test_a_trained_actor_on_other_services_is_one_line_in_sim_compare(tmp_path: Path):
    """`sim compare --policies inss` on a user's service (with a GPU curve): the shipped actor
    plans the paper's three, so the command stops before any run, naming the model file (issue
    43: a KeyError at testbed/train/compare.py)."""
    from testbed.train.compare import comparison_policies

    (tmp_path / "own.yaml").write_text(SERVICES["vidan-gpu"])
    profiles = load_profiles(tmp_path / "own.yaml")
    with pytest.raises(ConfigError) as exc:
        comparison_policies("inss", ["vidan"], profiles, total_units=8, models=ROOT / "models")
    assert "inss.zip: services: this inss model was trained to plan chatbot, imgcls, tts" in \
        str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.needs_root
@pytest.mark.timeout(240)
@pytest.mark.xdist_group(BESIDE_GROUP)  # one such testbed at a time
def test_fa2_runs_a_local_cell_of_a_users_service(tmp_path: Path):
    """fa2 plans a user's service with the built-in GPU curve on the real local testbed."""
    from tests.conftest import run_scenario_cli

    (tmp_path / "own.yaml").write_text(SERVICES["vidan-gpu"])
    path = tmp_path / "fa2.yaml"
    path.write_text("name: fa2-own\nservice_profiles: own.yaml\nduration_s: 20\n"
                    "scaler_period_s: 5\nservices:\n  - {name: vidan, policy: fa2}\n"
                    "clients:\n  - {service: vidan, ue_group: ai, rate: 3}\n")
    proc, cell = run_scenario_cli(path, tmp_path / "runs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    decisions = (cell / "decisions.jsonl").read_text().splitlines()
    assert decisions and all(json.loads(d)["policy"] == "fa2" for d in decisions)
    assert all(json.loads(d)["target"]["share_pct"] > 0 for d in decisions)  # fa2 planned it
