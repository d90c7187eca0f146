"""`testbed run --web`, `reproduce --web` and `testbed watch` as a user types them: `--web` alone,
a port in use or a folder that is no run refused in one line before anything runs, and a run's
page served from its start to its end by a process that goes with it."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from testbed.cli import optional_values
from tests.web.written_run import WrittenRun, record

ROOT = Path(__file__).resolve().parents[2]


def testbed(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, COLUMNS="200"))


def test_web_alone_takes_localhost_and_a_free_port():
    assert optional_values(["run", "s.yaml", "--web"]) == ["run", "s.yaml", "--web", "127.0.0.1:0"]
    assert optional_values(["run", "--web", "s.yaml"]) == ["run", "--web", "127.0.0.1:0", "s.yaml"]
    assert optional_values(["run", "--web", "--quiet", "s.yaml"])[2] == "127.0.0.1:0"
    for given in ("8080", "0.0.0.0:8080", "[::1]:0", "localhost:9000"):
        assert optional_values(["run", "s.yaml", "--web", given]) == ["run", "s.yaml", "--web", given]
    assert optional_values(["exec", "ai", "--", "x", "--web"]) == ["exec", "ai", "--", "x", "--web"]


def test_a_port_in_use_stops_the_run_before_it_starts_in_one_line(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = testbed("run", "scenarios/pipeline-sim.yaml", "--out", str(tmp_path), "--web",
                       str(port))
        watched = testbed("watch", str(tmp_path), "--web", f"127.0.0.1:{port}")
        reproduced = testbed("reproduce", "table5.1", "--rule-only", "--out",
                             str(tmp_path / "repro"), "--web", f"127.0.0.1:{port}")
    assert done.returncode == 4, done.stdout + done.stderr
    # after the scenario's trace lines (it loaded), one error
    errors = [line for line in done.stderr.splitlines() if not line.startswith("trace ")]
    assert errors == [f"error: --web 127.0.0.1:{port}: the port is in use (another server or "
                      "watch): give another, or 0 for a free one"], done.stderr
    assert not list(tmp_path.iterdir())  # nothing ran: no run directory
    assert watched.returncode == 4 and watched.stderr.count("error:") == 1
    assert reproduced.returncode == 4 and reproduced.stderr.count("error:") == 1
    assert "the port is in use" in reproduced.stderr


def test_watch_refuses_a_folder_that_is_no_run_in_one_line(tmp_path: Path):
    done = testbed("watch", str(tmp_path))
    assert done.returncode == 4
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path} is not a run directory (no manifest.json) nor a reproduce folder "
        "(no runs/): name runs/<time>-<scenario> or a reproduce's folder"]
    (tmp_path / "manifest.json").write_text("[1, 2]")
    done = testbed("watch", str(tmp_path))
    assert done.returncode == 4 and "not a run manifest" in done.stderr


def test_the_page_follows_a_run_to_its_end_and_goes_with_it(tmp_path: Path):
    """A simulator scenario (seconds, no root): its page, asked for at once, gets the snapshot,
    the run's record as results.json has it, and the end; then the port is closed."""
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "run", "scenarios/pipeline-sim.yaml",
                             "--out", str(tmp_path), "--no-progress", "--web"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, COLUMNS="200"))
    try:
        assert proc.stdout is not None
        url = None
        for line in proc.stdout:
            found = re.search(r"live page: (http://127\.0\.0\.1:\d+/)", line)
            if found:
                url = found.group(1)
                break
        assert url, proc.stderr.read() if proc.stderr else ""
        seen: list[tuple[str, dict]] = []
        with urllib.request.urlopen(url + "api/stream", timeout=60) as stream:
            name = None
            for raw in stream:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    seen.append((str(name), json.loads(line[6:])))
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, rest + err
    assert seen[-1][0] == "end" and seen[-1][1]["finished"]
    [run_dir] = tmp_path.iterdir()
    record = json.loads((run_dir / "results.json").read_text())
    heads = [d["head"] for k, d in seen if k in ("snapshot", "delta")]
    last = heads[-1]["record"]
    assert last["rows"] == record["rows"] and last["verdict"] == "PASS"
    assert f"testbed watch {run_dir}" in rest
    port = int(url.rsplit(":", 1)[1].strip("/"))
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # the server went with the run


def test_watch_serves_a_finished_run_until_interrupted(tmp_path: Path):
    run = WrittenRun(tmp_path)
    run.start_load()
    run.write_records([record(1, 2.0, 50.0)])
    run.finish()
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "watch", str(run.path), "--web",
                             "127.0.0.1:0"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        assert url, line
        with urllib.request.urlopen(url.group(1) + "api/overview", timeout=30) as r:
            overview = json.loads(r.read())
        assert overview["finished"] and overview["runs"][0]["verdict"] == "PASS"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
