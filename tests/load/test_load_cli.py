"""`testbed load` as the scenario runner will use it: a subprocess streaming records to disk,
stopped with SIGINT, and bad input rejected with file and line."""

import json
import os
import signal
import subprocess
import sys
import time

from testbed.profiles import ServiceProfile

PROFILE = ServiceProfile(capacity=4, queue_limit=100, proc_time_ms=(5, 10), startup_ms=0, slo_ms=500)


def start_replica():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed.cluster.serving",
            "--service",
            "chatbot",
            "--profile",
            PROFILE.model_dump_json(),
        ],
        stdout=subprocess.PIPE,
    )
    line = proc.stdout.readline().decode()
    assert line.startswith("LISTENING "), line
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def test_sigint_keeps_every_record(tmp_path):
    replica, url = start_replica()
    out = tmp_path / "records.jsonl"
    try:
        load = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "testbed",
                "load",
                "chatbot",
                "--url",
                url,
                "--rate",
                "50",
                "--duration",
                "30",
                "--out",
                str(out),
                "--quiet",
                "--slice",
                "embb",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, COLUMNS="200"),
        )
        # Interrupt once records are on disk (the writer flushes every 0.5 s), however long Python
        # takes to start on a busy machine; the run itself lasts 30 s, so this is not a race.
        deadline = time.monotonic() + 25.0
        while time.monotonic() < deadline and load.poll() is None:
            if out.exists() and len(out.read_bytes().splitlines()) >= 20:
                break
            time.sleep(0.1)
        load.send_signal(signal.SIGINT)
        output, _ = load.communicate(timeout=15)
    finally:
        replica.terminate()
        replica.wait(10)
    lines = out.read_text().splitlines()
    records = [json.loads(x) for x in lines]
    assert len(records) >= 20, output
    assert all(r["slice"] == "embb" for r in records)
    assert sum(r["error"] is None for r in records) >= 20
    assert {r["error"] for r in records} <= {None, "cancelled"}
    assert len({r["seq"] for r in records}) == len(records)
    # the end-of-run summary is printed on Ctrl-C too, over the same requests
    text = output.decode()
    assert f"chatbot → {url}: {len(records)} requests in" in text and "(interrupted)" in text, text
    assert "latency p50 / p90 / p95 / p99 / max" in text and "bytes sent / received" in text
    assert load.returncode == 0, text  # requests cancelled by the stop are not the service's errors


def test_a_closed_port_fails_past_the_error_threshold_with_a_summary(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "testbed", "load", "imgcls", "--url", f"http://127.0.0.1:{port}",
            "--rate", "10", "--duration", "1"]
    r = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=60)
    summary = json.loads(r.stdout)
    assert r.returncode == 3, r.stderr
    assert summary["finished"] == 10 and summary["errors"] == {"unreachable": 10}
    assert summary["error_rate"] == 1.0 and summary["bytes_sent"] == 0
    assert "error: 100.0% of 10 requests failed (> --max-error-rate 0.1)" in r.stderr
    r = subprocess.run([*argv, "--max-error-rate", "1", "--quiet"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, COLUMNS="200"))
    assert r.returncode == 0 and "unreachable 10" in r.stdout + r.stderr


def test_bad_trace_line_is_one_error_with_file_and_line(tmp_path):
    trace = tmp_path / "t.txt"
    trace.write_text("1 5\n1 five\n")
    out = tmp_path / "r.jsonl"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed",
            "load",
            "chatbot",
            "--url",
            "http://127.0.0.1:9",
            "--trace",
            str(trace),
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert res.returncode == 2
    assert f"{trace}:2: count: not an integer" in res.stderr
    assert not out.exists()
