"""A scenario's `warmup_s`: load and scaling before the measured window, kept in the run directory
but marked and left out of the results (testbed.scenario.cell, .results, .spec)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.errors import ConfigError
from testbed.pytest_plugin import BESIDE_GROUP
from testbed.scenario.cell import _end_decision_due, after_warmup
from testbed.scenario.load import parse_scenario
from testbed.scenario.results import cell_rows
from testbed.scenario.rundir import CellDir
from tests.conftest import run_scenario_cli

SCENARIO = """\
name: warm
duration_s: 10
warmup_s: 10
scaler_period_s: 5
traces_dir: .
services:
  - {name: imgcls, replicas: 1}
clients:
  - {service: imgcls, ue_group: ai, trace: steps.txt, start_s: 10}
"""


def _errors(text: str, tmp_path: Path) -> list[str]:
    (tmp_path / "steps.txt").write_text("10 4\n" * 2)
    with pytest.raises(ConfigError) as exc:
        parse_scenario(text, "warm.yaml", tmp_path)
    return [str(p) for p in exc.value.problems]


def test_a_warmup_of_part_of_a_scaler_period_is_refused_with_its_line(tmp_path: Path):
    text = SCENARIO.replace("warmup_s: 10", "warmup_s: 12").replace("start_s: 10", "start_s: 12")
    [err] = _errors(text, tmp_path)
    assert err.startswith("warm.yaml:3: warmup_s:") and "whole number of scaler periods" in err


def test_a_trace_client_needs_the_warmups_seconds_of_trace_before_its_start(tmp_path: Path):
    [err] = _errors(SCENARIO.replace("start_s: 10", "start_s: 5"), tmp_path)
    assert err.startswith("warm.yaml:9: clients[0].start_s:") and "at least 10" in err


def test_the_simulator_engine_refuses_a_warmup(tmp_path: Path):
    [err] = _errors(SCENARIO.replace("name: warm\n", "name: warm\nengine: sim\n"), tmp_path)
    assert err.startswith("warm.yaml:4: warmup_s:") and "testbed engine" in err


def _request(seq: int, latency_ms: float, error: str | None = None) -> dict:
    return {"service": "imgcls", "slice": "ai", "seq": seq, "scheduled": float(seq),
            "sent": float(seq), "latency_ms": latency_ms, "latency_sched_ms": latency_ms,
            "status": 0 if error else 200, "bytes_up": 1, "bytes_down": 1, "error": error}


def test_rows_leave_out_what_the_cell_marked_warmup(tmp_path: Path):
    """Fixture cell: 6 late requests, a crowded replica count and a bad reward in the warm-up;
    4 on-time requests, 2 replicas and reward -0.01 after it."""
    cell = CellDir.create(tmp_path, "00-imgcls", 0)
    cell.info.write_text(json.dumps({
        "slug": "00-imgcls", "label": "x", "rep": 0, "status": "ok", "params": {},
        "services": ["imgcls"], "time_scale": 1.0, "duration_s": 10, "measured_s": 10,
        "warmup_s": 10, "planned_requests": {"imgcls": 10},
        "warmup_requests": {"imgcls-ai-0.jsonl": 6}}))
    records = [_request(i, 900.0) for i in range(1, 7)] + [_request(i, 100.0) for i in range(7, 11)]
    (cell.requests / "imgcls-ai-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    cell.samples.write_text("".join(json.dumps(s) + "\n" for s in (
        {"t": -5.0, "warmup": True, "service": "imgcls", "ready": 1},
        {"t": 0.0, "warmup": True, "service": "imgcls", "ready": 5},
        {"t": 5.0, "service": "imgcls", "ready": 2},
        {"t": 10.0, "service": "imgcls", "ready": 2})))
    cell.decisions.write_text("".join(json.dumps(d) + "\n" for d in (
        {"t": 0.0, "warmup": True, "service": "imgcls", "reward": -0.9},
        {"t": 5.0, "service": "imgcls", "reward": -0.01},
        {"t": 10.0, "service": "imgcls", "reward": -0.01})))
    [row] = cell_rows(cell.path)
    assert (row["requests"], row["warmup_requests"], row["violations"]) == (4, 6, 0)
    assert row["slo_violation_rate"] == 0.0
    assert (row["mean_replicas"], row["reward"], row["decisions"]) == (2.0, -0.01, 2)
    # the whole cell, warm-up included, says what it lost: nothing here
    assert (row["planned_requests"], row["lost_requests"]) == (10, 0)


@pytest.mark.needs_root
@pytest.mark.slow
@pytest.mark.xdist_group(BESIDE_GROUP)  # one such testbed at a time
def test_a_real_run_measures_the_trace_window_after_its_warmup(tmp_path: Path):
    """On the local testbed: the client replays 10 s of trace before start_s (4 req/s) and the 10 s
    window from it (8 req/s, then 2 quiet seconds); the results hold the window's requests only,
    the run directory keeps and marks the warm-up's, and the window's last decision is taken
    although the client has finished before it."""
    (tmp_path / "steps.txt").write_text("10 40\n8 64\n2 0\n")
    scn = tmp_path / "warm.yaml"
    scn.write_text(SCENARIO)
    out = tmp_path / "runs"
    run, cell = run_scenario_cli(scn, out)
    assert run.returncode == 0, run.stdout + run.stderr
    info = json.loads((cell / "cell.json").read_text())
    # a cell the machine fell behind in (its replicas waited for a core beside the suite's other
    # workers) still measures the window it is asked to: what this test is about
    assert info["status"] in ("ok", "behind"), info["problems"]
    if info["status"] == "behind":
        assert all("the machine's" in p or "fell behind" in p for p in info["problems"]), info
    assert info["planned_requests"] == {"imgcls": 104}
    assert info["warmup_requests"] == {"imgcls-ai-0.jsonl": 40}
    sent = [json.loads(line) for line in (cell / "requests/imgcls-ai-0.jsonl").read_text().split()]
    assert len(sent) == 104  # the warm-up's requests are kept
    warm = sorted(r["scheduled"] for r in sent if r["seq"] <= 40)
    measured = sorted(r["scheduled"] for r in sent if r["seq"] > 40)
    # 4 req/s before the window, 8 req/s in it: the window starts at the boundary of the two
    assert warm[-1] - warm[0] == pytest.approx(9.75, abs=0.05)
    assert measured[-1] - measured[0] == pytest.approx(7.875, abs=0.05)
    assert measured[0] - warm[0] == pytest.approx(10.0, abs=0.05)
    assert abs(measured[0] - info["measure_started"]) < 1.0  # the runner's clock agrees
    samples = [json.loads(line) for line in (cell / "samples.jsonl").read_text().split()]
    # one sample a second: the first 10 are the warm-up's (t up to 0, taken up to 0.1 s late)
    assert [s.get("warmup", False) for s in samples][:11] == [True] * 10 + [False]
    assert max(s["t"] for s in samples[:10]) < 0.5 and min(s["t"] for s in samples[10:]) > 0
    decisions = [json.loads(line) for line in (cell / "decisions.jsonl").read_text().split()]
    # one imgcls decision every 5 s: 2 in the warm-up, then 2 in the window, the last at its end
    assert [d.get("warmup", False) for d in decisions] == [True, True, False, False]
    [row] = [r for r in json.loads(next(out.glob("*/results.json")).read_text())["rows"]
             if r.get("service") == "imgcls"]
    assert (row["requests"], row["warmup_requests"], row["lost_requests"]) == (64, 40, 0)
    assert row["decisions"] == 2


def test_the_simulator_beside_a_cell_starts_from_the_replicas_its_warmup_left(tmp_path: Path):
    (tmp_path / "steps.txt").write_text("10 40\n10 80\n")
    scn = parse_scenario(SCENARIO, "warm.yaml", tmp_path).scenario
    samples = [{"t": -1.0, "warmup": True, "service": "imgcls", "ready": 2, "desired": 2},
               {"t": 0.0, "warmup": True, "service": "imgcls", "ready": 2, "desired": 3},
               {"t": 1.0, "service": "imgcls", "ready": 3, "desired": 4}]
    assert after_warmup(scn, samples).service("imgcls").replicas == 3
    cold = scn.model_copy(update={"warmup_s": 0.0})
    assert after_warmup(cold, samples).service("imgcls").replicas == 1


def test_the_decision_due_at_the_windows_end_waits_for_nothing_but_its_time():
    # clients done 1.5 s before the end of a 120 s window: its last decision (due at 120) is
    # still taken; once taken (the next is due at 150) nothing more is; clients gone in the first
    # minutes end the cell at once, as before
    assert _end_decision_due(118.5, 120.0, 120.0, 30.0)
    assert not _end_decision_due(120.1, 150.0, 120.0, 30.0)
    assert not _end_decision_due(40.0, 60.0, 120.0, 30.0)
