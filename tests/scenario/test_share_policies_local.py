"""inss on the real local testbed (namespaces, replica processes, load clients): the shipped actor
plans the three services through the runner's control loop, the replicas run the shares and
batches it set, and the interference stretch from their neighbours reaches them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.pytest_plugin import BESIDE_GROUP
from testbed.traces import packaged_traces
from tests.conftest import namespaces_with_prefix

pytestmark = pytest.mark.needs_root  # a real testbed: network namespaces, tc

ROOT = Path(__file__).resolve().parents[2]
TRACES = packaged_traces() / "test"

SCENARIO = f"""\
name: inss-local
duration_s: 30
scaler_period_s: 10
total_units: 8
seed: 5
interference: true
service_profiles: {ROOT / "scenarios" / "profiles" / "fast-startup.yaml"}
traces_dir: {TRACES}
testbed:
  name: inl
  link: {{capacity_mbit: 1000}}
  slices:
    - {{name: ai, sst: 1, sd: "000001", subnet: 10.45.0.0/24, guaranteed_mbit: 500}}
  ue_groups:
    - {{name: ai, slice: ai, count: 1}}
services:
  - {{name: chatbot, policy: inss}}
  - {{name: imgcls, policy: inss}}
  - {{name: tts, policy: inss}}
clients:
  - {{service: chatbot, ue_group: ai, trace: day7-shift0h.txt, ratio: 0.15, start_s: 54000}}
  - {{service: imgcls, ue_group: ai, trace: day7-shift8h.txt, ratio: 0.4, start_s: 54000}}
  - {{service: tts, ue_group: ai, trace: day7-shift16h.txt, ratio: 0.15, start_s: 54000}}
"""


@pytest.mark.xdist_group(BESIDE_GROUP)  # one such testbed at a time
def test_inss_plans_the_local_testbed_and_the_replicas_run_what_it_set(tmp_path: Path):
    scn = tmp_path / "inss-local.yaml"
    scn.write_text(SCENARIO)
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(scn), "--out", str(out),
                           "--no-progress"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = out.iterdir()
    cell = next(run.glob("cells/*/rep-0"))
    info = json.loads((cell / "cell.json").read_text())
    assert namespaces_with_prefix(f"tb-{info['testbed']['name']}-") == []
    assert info["models"]["inss"].endswith("models/inss.zip")
    decisions = [json.loads(x) for x in (cell / "decisions.jsonl").read_text().splitlines()]
    assert {d["policy"] for d in decisions} == {"inss"} and len(decisions) >= 6
    assert all(d["target"] is not None for d in decisions)
    rows = {r["service"]: r for r in json.loads((run / "results.json").read_text())["rows"]}
    assert set(rows) == {"chatbot", "imgcls", "tts"}
    for r in rows.values():
        assert r["requests"] > 0 and r["replica_probes"] > 0
        # share, batch and stretch as the cluster set them (the message: the probes that differ)
        assert r["config_mismatches"] == 0, [
            p for p in map(json.loads, (cell / "replicas.jsonl").read_text().splitlines())
            if "error" in p or any(p.get(k) != pytest.approx(p.get(f"{k}_set"))
                                   for k in ("share", "batch", "stretch"))]
        assert r["target_mismatches"] == 0  # ... which are the actor's last applied targets
    # three replicas start on the first emulated GPU: each feels the other two
    probes = [json.loads(x) for x in (cell / "replicas.jsonl").read_text().splitlines()]
    first = [p for p in probes if p["t"] == probes[0]["t"]]
    assert len(first) == 3 and {p["gpu"] for p in first} == {0}
    assert all(p["stretch"] == pytest.approx(1 + 2 * (0.25 * 0.6 + 0.20 * 0.5) * 0.25) for p in first)
