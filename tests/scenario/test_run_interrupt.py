"""A real scenario run interrupted with Ctrl-C: it stops cleanly and keeps what it collected."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.pytest_plugin import BESIDE_GROUP
from tests.conftest import default_sigint, namespaces_with_prefix

pytestmark = [pytest.mark.needs_root, pytest.mark.slow]  # a whole scenario run

SCENARIO = """\
name: interrupt
duration_s: 60
time_scale: 2
services:
  - {name: imgcls, replicas: 1}
clients:
  - {service: imgcls, ue_group: ai, rate: 5}
cross_traffic:
  - {slice: be, flows: 2}
"""


@pytest.mark.xdist_group(BESIDE_GROUP)  # one such testbed at a time
def test_ctrl_c_keeps_records_writes_report_and_cleans_up(tmp_path: Path):
    scn = tmp_path / "interrupt.yaml"
    scn.write_text(SCENARIO)
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(scn), "--out", str(out),
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=dict(os.environ, COLUMNS="200"), preexec_fn=default_sigint)
    deadline = time.monotonic() + 60
    records: list[Path] = []
    while time.monotonic() < deadline:
        records = [p for p in out.glob("*/cells/*/rep-0/requests/*.jsonl") if p.stat().st_size]
        if records and len(records[0].read_text().splitlines()) >= 10:
            break
        time.sleep(0.2)
    assert records, "no request records appeared"
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    run = next(out.iterdir())
    lines = records[0].read_text().splitlines()
    assert len(lines) >= 10 and all(json.loads(x)["service"] == "imgcls" for x in lines)
    info = json.loads(next(run.glob("cells/*/rep-0/cell.json")).read_text())
    assert info["status"] == "interrupted"
    assert (run / "report.html").exists() and "interrupted" in (run / "report.md").read_text()
    name = info["testbed"]["name"]
    assert namespaces_with_prefix(f"tb-{name}-") == []
    # replicas of this run (other runs on the machine have other parents)
    leftover = subprocess.run(["pgrep", "-f", f"testbed.cluster.serving .*--parent-pid {proc.pid} "],
                              capture_output=True, text=True).stdout.split()
    assert leftover == []
