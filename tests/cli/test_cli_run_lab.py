"""`testbed run --profile lab`: --check prints the plan without a lab; bad input is one line, exit ≠ 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("kubernetes.client", reason="the lab extra (kubernetes) is not installed")

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = """\
all:
  children:
    core: {hosts: {core1: {upf_n6_interface: eno2}}}
    ran: {hosts: {ran1: {}}}
    cluster_server: {hosts: {gpu1: {ansible_host: gpu1.lab.example}}}
    traffic: {hosts: {traffic1: {iperf3_ports: [5201, 5202]}}}
"""


def _testbed(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=240,
                          env=dict(os.environ, COLUMNS="300", PYTHONPATH=str(ROOT)))


def test_check_prints_every_action_in_order_without_a_lab(tmp_path: Path):
    inv = tmp_path / "inventory.yml"
    inv.write_text(INVENTORY)
    r = _testbed("run", "--profile", "lab", "-i", str(inv), "--check", "--out", str(tmp_path),
                 str(ROOT / "scenarios" / "slicing-ci.yaml"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout + r.stderr
    order = ["GET deployments/imgcls/scale", "prometheus GET /api/v1/status/buildinfo",
             "ran1$ ip -o -4 addr show", "core1$ systemctl restart tb-slice-shaping",
             "PATCH /apis/apps/v1/namespaces/drafas/deployments/imgcls/scale",
             "-- iperf3 -c traffic1", "-B 10.46.0.3", "testbed load imgcls --url http://gpu1.lab.example:",
             "--source 10.45.0.2", "prometheus queries", "systemctl stop", "fetch ran1:"]
    at = [out.find(x) for x in order]
    assert all(i >= 0 for i in at), dict(zip(order, at, strict=True))
    assert at == sorted(at)
    assert "check mode: a plan, nothing was changed on the lab" in out
    # a plan, not a run (issue 35): no cell claims lost requests, no results for report or judge
    assert "planned requests lost" not in out and "problem:" not in out
    (plan,) = tmp_path.glob("*-slicing-ci-plan")
    assert sorted(p.name for p in plan.iterdir()) == ["manifest.json", "manifests", "plan.json",
                                                      "plan.txt"]
    marked = json.loads((plan / "plan.json").read_text())
    assert marked["plan"] is True and len(marked["cells"]) == 6 and marked["problems"] == []
    assert "PATCH /apis/apps/v1/namespaces/drafas/deployments/imgcls/scale" in \
        (plan / "plan.txt").read_text()


def test_lab_without_inventory_is_refused(tmp_path: Path):
    r = _testbed("run", "--profile", "lab", str(ROOT / "scenarios" / "slicing-ci.yaml"),
                 cwd=tmp_path)
    assert r.returncode == 2 and "the lab profile needs -i INVENTORY" in r.stderr


def test_inventory_without_ue_hosts_is_one_line(tmp_path: Path):
    inv = tmp_path / "inventory.yml"
    inv.write_text(INVENTORY.replace("    ran: {hosts: {ran1: {}}}\n", ""))
    r = _testbed("run", "--profile", "lab", "-i", str(inv), "--check", "--out", str(tmp_path),
                 str(ROOT / "scenarios" / "slicing-ci.yaml"), cwd=tmp_path)
    assert r.returncode != 0
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
    assert len(lines) == 1 and "no UE hosts: the inventory's group 'ran'" in lines[0], lines


def test_check_shows_inss_shares_and_batches_patched_into_the_deployments(tmp_path: Path):
    """The lab's half of a share policy: the shipped inss actor plans the three services and each
    decision that changes share or batch is one Deployment patch with the MPS and batch env."""
    pytest.importorskip("stable_baselines3", reason="inss needs the drl extra")
    inv = tmp_path / "inventory.yml"
    inv.write_text(INVENTORY)
    scn = tmp_path / "inss.yaml"
    scn.write_text("name: inss-lab\nduration_s: 30\nscaler_period_s: 10\n"
                   "services:\n" + "".join(f"  - {{name: {s}, policy: inss}}\n"
                                            for s in ("chatbot", "imgcls", "tts")) +
                   "clients:\n  - {service: imgcls, ue_group: ai, rate: 2}\n")
    r = _testbed("run", "--profile", "lab", "-i", str(inv), "--check", "--out", str(tmp_path),
                 str(scn), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout + r.stderr
    patches = [line for line in out.splitlines()
               if "PATCH /apis/apps/v1/namespaces/drafas/deployments/" in line and "/scale" not in line]
    assert patches, out[-3000:]
    assert all('"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"' in p and '"TESTBED_BATCH_SIZE"' in p
               and '"nvidia.com/gpu"' in p for p in patches)
    assert "check mode: a plan, nothing was changed on the lab" in out


ASR_PROFILES = """\
services:
  asr:
    capacity: 1
    queue_limit: 4
    proc_time_ms: [100, 300]
    startup_ms: 5000
    slo_ms: 800
    units: 1
    deploy: {image: example/asr:1, port: 8080, gpu: true}
"""
ASR_SCENARIO = """\
name: asr-lab
duration_s: 10
total_units: 4
service_profiles: profiles.yaml
services:
  - {name: asr, replicas: 1}
  - {name: imgcls, replicas: 1}
clients:
  - {service: asr, ue_group: ai, rate: 2}
"""


def _asr(tmp_path: Path, profiles: str = ASR_PROFILES) -> Path:
    (tmp_path / "profiles.yaml").write_text(profiles)
    scn = tmp_path / "asr.yaml"
    scn.write_text(ASR_SCENARIO)
    return scn


def test_check_plans_the_manifest_generated_for_a_users_service(tmp_path: Path):
    """A service of the scenario's own profile file: its manifest is generated from its deploy:
    (example inventory, as `up --profile lab` would apply it) and the run drives its Deployment."""
    inv = ROOT / "playbooks" / "inventory.example.yml"
    r = _testbed("run", "--profile", "lab", "-i", str(inv), "--check", "--out", str(tmp_path),
                 str(_asr(tmp_path)), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout + r.stderr
    (planned,) = [line for line in out.splitlines() if "Deployment drafas/asr" in line]
    assert "(example/asr:1, port 8080, 1 nvidia.com/gpu per pod, 1 replica)" in planned
    assert "NodePort Service drafas/asr" in planned
    manifest = planned.split("manifest ", 1)[1].split(":", 1)[0]
    docs = [d for d in yaml.safe_load_all(Path(manifest).read_text()) if d]
    assert [(d["kind"], d["metadata"]["namespace"]) for d in docs] == [("Deployment", "drafas"),
                                                                        ("Service", "drafas")]
    assert "PATCH /apis/apps/v1/namespaces/drafas/deployments/asr/scale" in out
    assert "testbed load asr --url http://" in out


def test_a_service_without_deploy_is_one_line_naming_its_profile_file(tmp_path: Path):
    scn = _asr(tmp_path, ASR_PROFILES.replace("    deploy: {image: example/asr:1, port: 8080, "
                                              "gpu: true}\n", ""))
    inv = tmp_path / "inventory.yml"
    inv.write_text(INVENTORY)
    r = _testbed("run", "--profile", "lab", "-i", str(inv), "--check", "--out", str(tmp_path),
                 str(scn), cwd=tmp_path)
    assert r.returncode != 0
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
    assert len(lines) == 1, lines
    assert f"{tmp_path / 'profiles.yaml'}:2: services.asr.deploy: service 'asr' has no lab " \
           "container" in lines[0]
    assert "GET deployments" not in r.stdout, "refused before anything reaches the lab"


def test_sleeping_replicas_are_refused_on_the_lab_in_one_line(tmp_path: Path):
    """replica_work: sleep is the local profile's stand-in for work a small machine cannot keep up
    with at a time scale; the lab runs the real services, so it is refused before any action."""
    inv = tmp_path / "inventory.yml"
    inv.write_text(INVENTORY)
    r = _testbed("run", "--profile", "lab", "-i", str(inv), "--check", "--out", str(tmp_path),
                 "--replica-work", "sleep", str(ROOT / "scenarios" / "slicing-ci.yaml"), cwd=tmp_path)
    assert r.returncode != 0
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
    assert len(lines) == 1 and "replica_work: the lab runs the real services" in lines[0], lines
    assert "GET deployments" not in r.stdout
    bad = _testbed("run", "--replica-work", "nap", "--plan", str(ROOT / "scenarios" / "smoke.yaml"),
                   cwd=tmp_path)
    assert bad.returncode != 0 and "--replica-work" in bad.stdout + bad.stderr
