"""`--metrics prometheus` on the local profile: refused in one line without the server, and a
Prometheus left by a crashed run is removed by `testbed down` with its testbed."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.bringup.local import LocalTestbed, teardown
from testbed.config import load_testbed
from testbed.net.state import prometheus_dir
from testbed.pytest_plugin import BESIDE_GROUP

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "metrics-prometheus-ci.yaml"


def _testbed(*argv: str, path: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=path, COLUMNS="100")
    return subprocess.run([sys.executable, "-m", "testbed", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.needs_root
def test_without_the_server_the_run_is_one_line_and_leaves_nothing(tmp_path: Path):
    # a PATH with everything but prometheus (ip, tc and iperf3 stay reachable)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in os.environ["PATH"].split(os.pathsep):
        for tool in ("ip", "tc", "iperf3", "git"):
            src = Path(d) / tool
            if src.exists() and not (bin_dir / tool).exists():
                (bin_dir / tool).symlink_to(src)
    r = _testbed("run", str(SCENARIO), "--out", str(tmp_path / "runs"), "--no-progress",
                 path=str(bin_dir), cwd=tmp_path)
    assert r.returncode != 0
    assert "needs the `prometheus` server on PATH" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_an_unknown_metrics_source_is_one_line(tmp_path: Path):
    r = _testbed("run", str(SCENARIO), "--metrics", "statsd", path=os.environ["PATH"], cwd=tmp_path)
    assert r.returncode == 2
    assert "--metrics" in r.stderr and "'in-process' or 'prometheus'" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.needs_root
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="no prometheus server on PATH")
def test_down_stops_a_crashed_runs_prometheus_and_removes_its_data():
    spec = load_testbed().model_copy(update={"name": "promdown"})
    tb = LocalTestbed(spec)
    tb.up()
    workdir = prometheus_dir(spec.name)
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text("scrape_configs: []\n")
        # as a cell starts it: inside the data-network namespace, in a session of its own
        proc = subprocess.Popen(
            ["ip", "netns", "exec", tb.topology.dn.name, shutil.which("prometheus"),
             f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
             "--web.listen-address=127.0.0.1:0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(1.0)
        assert proc.poll() is None, "prometheus did not start"
    except BaseException:
        teardown(spec.name)
        raise
    teardown(spec.name)  # what `testbed down --name promdown` does after the run died
    proc.wait(timeout=10)  # killed with its namespace's processes
    assert not workdir.exists()


# `testbed run` with the cell's comparison fed a Prometheus window whose utilization is doctored
DOCTORED_RUN = """
import dataclasses, sys
import testbed.scenario.backends as backends
real = backends.compare
backends.compare = lambda local, remote: real(local, dataclasses.replace(
    remote, utilization=min(remote.utilization + 0.2, 1.0) if remote.service == "imgcls"
    else remote.utilization))
from testbed.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="no prometheus server on PATH")
@pytest.mark.xdist_group(BESIDE_GROUP)  # one such testbed at a time
def test_a_run_whose_metric_sources_disagree_exits_non_zero_naming_why(tmp_path: Path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    r = subprocess.run([sys.executable, "-c", DOCTORED_RUN, "run", str(SCENARIO), "--out",
                        str(tmp_path / "runs"), "--no-progress"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert re.search(r"metrics sources disagree on imgcls: utilization \d\.\d{3} in-process vs "
                     r"\d\.\d{3} prometheus \(bound ±0\.05\)", out), out
    assert "chatbot: in-process / prometheus" in out and "Traceback" not in out
    # the checks would pass on the figures (a healthy run passes them): the failed cell decides
    assert "its results cannot decide" in out
    (cell,) = (tmp_path / "runs").glob("*/cells/*/rep-0/cell.json")
    info = json.loads(cell.read_text())
    assert info["status"] == "failed" and len(info["failures"]) == 1
    assert [a["agrees"] for a in info["metrics_agreement"]] == [False, True]
