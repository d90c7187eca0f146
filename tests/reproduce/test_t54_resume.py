"""Issue 41: Table 5.4 over a long window runs in checkpointed segments, and `testbed reproduce
table5.4 --resume RUN_DIR` continues an interrupted run after its last finished segment with the
same result as a run straight through. The scenario runs through the simulator here (a stand-in
for the testbed's runs: the same segments, deterministic, in seconds); what is under test is the
checkpointing, the resume and the combination of the segments' rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import testbed.reproduce.run as repro
import testbed.reproduce.segments as seg
from testbed.cli import main
from testbed.errors import MachineBehind
from testbed.reproduce.artefacts import select
from testbed.reproduce.model import Options
from testbed.scenario.load import parse_scenario
from testbed.scenario.results import behind_cells
from testbed.scenario.runner import RunOptions, run_scenario
from testbed.traces import packaged_traces

TRACES = packaged_traces()


@pytest.fixture
def sim_runs(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Table 5.4's scenario runs go through the simulator (no warm-up: the simulator has none),
    in segments of 600 s; returns the start of each segment run, in order."""
    started: list[float] = []

    def sim_run(path, partial, options, overrides=None, *, text=None):
        data = yaml.safe_load(text)
        started.append(data["clients"][0]["start_s"])
        if getattr(options, "interrupt_at", None) == len(started):
            raise KeyboardInterrupt
        data.update(engine="sim", warmup_s=0, compare_sim=False)
        loaded = parse_scenario(yaml.safe_dump(data), str(path), path.parent)
        result = run_scenario(loaded, RunOptions(out_root=partial / "runs", progress=False))
        return result.run_dir.relative_to(partial), result.rows

    monkeypatch.setattr(repro, "_run", sim_run)
    monkeypatch.setattr(repro, "preflight", lambda *a, **k: None)  # no root, models or extras
    monkeypatch.setattr(seg, "T54_SEGMENT_S", 600)
    return started


def _options(out: Path) -> Options:
    return Options(out=out, traces_dir=TRACES, rule_only=True, t54_duration_s=1800,
                   t54_start_s=48600, t54_repetitions=1, show_runs=False, progress=lambda s: None)


def _cells(result) -> list[tuple]:
    (v,) = result.verdicts
    return [(c.service, c.policy, c.ours) for c in v.table.cells]


def test_an_interrupted_table54_resumes_after_its_segments_with_the_same_result(
        tmp_path: Path, sim_runs: list[float]):
    straight = repro.reproduce(select(["table5.4"]), _options(tmp_path / "straight"))
    assert sim_runs == [48600, 49200, 49800]  # three segments of 600 s
    sim_runs.clear()

    interrupted = _options(tmp_path / "halves")
    interrupted.interrupt_at = 2  # type: ignore[attr-defined]  # Ctrl-C in the second segment
    with pytest.raises(KeyboardInterrupt):
        repro.reproduce(select(["table5.4"]), interrupted)
    partial = tmp_path / "halves.partial"
    assert [p.name for p in sorted((partial / "t54").glob("*.json"))] == ["segment-000-48600.json"]
    sim_runs.clear()

    out, kept = repro.resumed(partial)
    assert out == tmp_path / "halves" and kept["t54_duration_s"] == 1800
    resumed = repro.reproduce(select(["table5.4"]), Options(out=out, **kept, show_runs=False,
                                                           progress=lambda s: None))
    assert sim_runs == [49200, 49800]  # the finished segment is not run again
    assert _cells(resumed) == _cells(straight)
    assert all(c[2]["reward"] is not None for c in _cells(straight))


def _fall_behind(monkeypatch: pytest.MonkeyPatch, times: set[int]) -> None:
    """The segment runs numbered in `times` (1: the first run) end with a cell whose clients fell
    behind, as the testbed's cell records it (cell.json: failed, `behind_schedule`)."""
    sim_run, count = repro._run, [0]

    def run(*args, **kwargs):
        run_dir, rows = sim_run(*args, **kwargs)
        count[0] += 1
        if count[0] in times:
            cell = next((args[1] / run_dir).glob("cells/*/rep-*/cell.json"))
            info = json.loads(cell.read_text())
            cell.write_text(json.dumps({**info, "status": "failed",
                                        "behind_schedule": {"imgcls": 61.0}}))
        return run_dir, rows

    monkeypatch.setattr(repro, "_run", run)


def test_a_segment_the_machine_fell_behind_in_runs_once_more_at_time_scale_1(
        tmp_path: Path, sim_runs: list[float], monkeypatch: pytest.MonkeyPatch):
    _fall_behind(monkeypatch, {2})
    lines: list[str] = []
    options = _options(tmp_path / "day")
    options.progress = lines.append
    repro.reproduce(select(["table5.4"]), options)
    assert sim_runs == [48600, 49200, 49200, 49800]
    assert ("Table 5.4 segment 2/3: the machine fell behind at time scale 1 (imgcls p99 61 ms "
            "late); running it once more") in lines
    kept = json.loads((tmp_path / "day" / "t54" / "segment-001-49200.json").read_text())
    # the second run of the segment is the one kept
    assert not behind_cells(tmp_path / "day" / kept["run_dir"])
    assert all(r["status"] == "ok" for r in kept["rows"])


def test_a_segment_behind_twice_stops_the_run_and_a_resume_runs_it_first(
        tmp_path: Path, sim_runs: list[float], monkeypatch: pytest.MonkeyPatch):
    _fall_behind(monkeypatch, {2, 3})
    with pytest.raises(MachineBehind, match=r"segment 2/3 \(from 13:40\) fell behind even at time "
                                            r"scale 1 \(imgcls p99 61 ms late"):
        repro.reproduce(select(["table5.4"]), _options(tmp_path / "day"))
    partial = tmp_path / "day.partial"
    assert [p.name for p in sorted((partial / "t54").glob("*.json"))] == ["segment-000-48600.json"]
    sim_runs.clear()
    out, kept = repro.resumed(partial)
    repro.reproduce(select(["table5.4"]), Options(out=out, **kept, show_runs=False,
                                                  progress=lambda s: None))
    assert sim_runs == [49200, 49800]


def test_a_kept_segment_whose_clients_fell_behind_is_run_again_on_resume(
        tmp_path: Path, sim_runs: list[float]):
    """A segment kept by a run before the check (its cells failed behind schedule)."""
    interrupted = _options(tmp_path / "day")
    interrupted.interrupt_at = 3  # type: ignore[attr-defined]
    with pytest.raises(KeyboardInterrupt):
        repro.reproduce(select(["table5.4"]), interrupted)
    partial = tmp_path / "day.partial"
    second = json.loads((partial / "t54" / "segment-001-49200.json").read_text())
    cell = next((partial / second["run_dir"]).glob("cells/*/rep-*/cell.json"))
    cell.write_text(json.dumps({**json.loads(cell.read_text()), "status": "failed",
                                "behind_schedule": {"chatbot": 260.0}}))
    sim_runs.clear()
    out, kept = repro.resumed(partial)
    lines: list[str] = []
    repro.reproduce(select(["table5.4"]), Options(out=out, **kept, show_runs=False,
                                                  progress=lines.append))
    assert sim_runs == [49200, 49800]
    assert ("Table 5.4 segment 2/3: kept, but its clients fell behind (chatbot p99 260 ms late); "
            "running it again at time scale 1") in lines


def test_a_segment_behind_at_a_time_scale_lowers_it_for_itself_and_the_rest(
        tmp_path: Path, sim_runs: list[float], monkeypatch: pytest.MonkeyPatch):
    """At time scale 16 the second segment falls behind: it runs again at 12, and the third
    runs at 12 too, rather than failing or stopping; the lowered scale is kept for a resume."""
    scales: list[float] = []
    sim_run = repro._run

    def noting(path, partial, options, overrides=None, *, text=None):
        scales.append(yaml.safe_load(text)["time_scale"])
        return sim_run(path, partial, options, overrides, text=text)

    monkeypatch.setattr(repro, "_run", noting)
    _fall_behind(monkeypatch, {2})
    lines: list[str] = []
    options = _options(tmp_path / "day")
    options.t54_time_scale, options.progress = 16.0, lines.append
    result = repro.reproduce(select(["table5.4"]), options)
    assert sim_runs == [48600, 49200, 49200, 49800] and scales == [16.0, 16.0, 12.0, 12.0]
    (v,) = result.verdicts  # the table says at which scale its figures were measured
    assert ("the machine fell behind at time scale 16: from segment 2 on the window ran at time "
            "scale 12") in v.table.notes
    assert ("Table 5.4 segment 2/3: the machine fell behind at time scale 16 (imgcls p99 61 ms "
            "late); running it, and the segments after it, at time scale 12") in lines
    assert json.loads((tmp_path / "day" / "t54" / "time-scale.json").read_text())["time_scale"] == 12


def test_rows_combine_by_requests_decisions_and_seconds():
    row = {"engine": "testbed", "policy": "ppo", "rep": 0, "service": "imgcls", "status": "ok"}
    a = {**row, "requests": 100, "slo_violation_rate": 0.1, "decisions": 10, "reward": -0.2,
         "mean_replicas": 2.0, "mean_latency_ms": 100.0, "p99_latency_ms": 400.0}
    b = {**row, "requests": 300, "slo_violation_rate": 0.3, "decisions": 30, "reward": -0.4,
         "mean_replicas": 4.0, "mean_latency_ms": 200.0, "status": "failed"}
    (c,) = seg.combine_rows([(600.0, [a, {"slice": "be", "iperf_goodput_mbit": 5}]), (1800.0, [b])])
    assert c["requests"] == 400 and c["decisions"] == 40
    assert c["slo_violation_rate"] == pytest.approx(0.25)  # (10 + 90) / 400
    assert c["reward"] == pytest.approx(-0.35)
    assert c["mean_replicas"] == pytest.approx(3.5)  # (2 * 600 + 4 * 1800) / 2400
    assert c["mean_latency_ms"] == pytest.approx(175.0)
    assert "p99_latency_ms" not in c and c["status"] == "failed" and c["segments"] == 2
    assert seg.segments(0, 1500, 600) == [(0, 600), (600, 600), (1200, 300)]


def test_resume_takes_the_runs_own_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["reproduce", "table5.4", "--resume", str(tmp_path / "none")]) != 0
    assert "no interrupted reproduce to resume" in capsys.readouterr().err
    assert main(["reproduce", "table5.4", "--resume", str(tmp_path), "--t54-duration", "60"]) != 0
    assert "leave out --t54-duration" in capsys.readouterr().err
