"""`testbed run --profile lab`: --check prints the plan without a lab; bad input is one line, exit ≠ 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert "check mode: nothing was changed on the lab" in out


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
    assert "check mode: nothing was changed on the lab" in out
