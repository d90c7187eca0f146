"""Table 5.4 at CI size: `reproduce --quick` measures its 2-minute window after a warm-up, the
full size keeps none, and the judge still fails what must fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from testbed.judge.outcome import FAIL, NOT_RUN
from testbed.reproduce import run
from testbed.reproduce.artefacts import ARTEFACTS
from testbed.reproduce.model import Options
from testbed.reproduce.tables import testbed_table
from testbed.scenario.load import parse_scenario
from testbed.scenario.results import cell_rows
from testbed.scenario.rundir import CellDir


def _traces(root: Path) -> Path:
    for h in (0, 8, 16):
        p = root / "test" / f"day7-shift{h}h.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("60 30\n" * 1440)
    return root


def _rows(reward: float | None) -> list[dict]:
    return [{"service": s, "policy": "rule_v2", "reward": reward, "slo_violation_rate": 0.01,
             "mean_replicas": 2.0, "mean_latency_ms": 300.0, "rep": 0}
            for s in ("chatbot", "imgcls", "tts")]


def _table54(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: list[dict], **options):
    """`_table54` with a fake `_run` that keeps the scenario it was given and returns `rows`: the
    verdict and the scenario's text (a list of them when the window ran in segments)."""
    given: list[str] = []

    def fake_run(path, partial, opts, overrides=None, *, text=None):
        given.append(text)
        return Path("runs/t54"), rows

    monkeypatch.setattr(run, "_run", fake_run)
    opts = Options(traces_dir=_traces(tmp_path / "traces"), rule_only=True, progress=lambda _: None,
                   **options)
    verdict = run._table54(ARTEFACTS["table5.4"], tmp_path, opts)
    return verdict, given[0] if len(given) == 1 else given


def test_quick_measures_its_window_after_a_warmup_that_the_scenario_accepts(tmp_path, monkeypatch):
    verdict, text = _table54(tmp_path, monkeypatch, _rows(-0.05), quick=True)
    scn = parse_scenario(text, "slo-testbed.yaml", run.SCENARIOS).scenario  # it loads as it runs
    assert (scn.warmup_s, scn.duration_s, scn.repetitions) == (run.T54_QUICK_WARMUP_S, 120, 1)
    assert {c.start_s for c in scn.clients} == {run.T54_START_S}  # the window is still 13:30
    assert "after a 120 s warm-up (not measured)" in verdict.table.title
    # the judge is not loosened: the cells need the day, DRL against rule v2 20 minutes x 2
    assert verdict.verdict == NOT_RUN
    assert "--t54-duration 86400" in verdict.decided_by


def test_the_full_size_keeps_no_warmup(tmp_path, monkeypatch):
    _, text = _table54(tmp_path, monkeypatch, _rows(-0.05), quick=False)
    assert yaml.safe_load(text)["warmup_s"] == 0


def test_quick_from_the_days_first_minute_has_no_warmup_and_says_so(tmp_path, monkeypatch):
    verdict, text = _table54(tmp_path, monkeypatch, _rows(-0.05), quick=True, t54_start_s=60)
    assert yaml.safe_load(text)["warmup_s"] == 0
    assert any("no warm-up" in n for n in verdict.table.notes)


def test_a_window_whose_every_decision_was_warmup_has_no_reward_and_fails(tmp_path):
    """Rows made from a cell whose scaler decided only in the warm-up: no reward to judge, a FAIL
    (a cell without figures), not a PASS on the warm-up's figures."""
    rows = []
    for service in ("chatbot", "imgcls", "tts"):
        cell = CellDir.create(tmp_path, f"00-{service}", 0)
        cell.info.write_text(json.dumps({
            "slug": f"00-{service}", "label": "x", "rep": 0, "status": "ok",
            "params": {"policy": "rule_v2"}, "services": [service], "time_scale": 1.0,
            "duration_s": 20, "measured_s": 20, "warmup_s": 120, "warmup_requests": {}}))
        cell.decisions.write_text(json.dumps(
            {"t": 0.0, "warmup": True, "service": service, "reward": -0.0353}) + "\n")
        rows += cell_rows(cell.path)
    assert [r["reward"] for r in rows] == [None, None, None]
    table = testbed_table(rows, window="test", duration_s=86400, repetitions=1)
    assert table.verdict == FAIL


def test_the_whole_day_at_a_time_scale_runs_sleeping_replicas_and_is_judged_against_the_paper(
        tmp_path, monkeypatch):
    """--t54-time-scale 4 on the whole day: the scenario runs at time scale 4 with replicas that
    only sleep, the title says so, and the cells are judged against the paper (no NOT RUN): with
    the rows 0.05 off the paper's reward, the table FAILs."""
    verdict, texts = _table54(tmp_path, monkeypatch, _rows(-0.08), t54_start_s=0,
                              t54_duration_s=86400, t54_repetitions=1, t54_time_scale=4.0)
    # in 24 checkpointed segments of an hour, each after a warm-up but the first (issue 41)
    scns = [parse_scenario(t, "slo-testbed.yaml", run.SCENARIOS).scenario for t in texts]
    assert [(s.clients[0].start_s, s.duration_s, s.warmup_s) for s in scns] == [
        (h * 3600, 3600, 120 if h else 0) for h in range(24)]
    assert {(s.time_scale, s.replica_work) for s in scns} == {(4.0, "sleep")}
    assert "at time scale 4 (replicas sleeping their profile's time)" in verdict.table.title
    assert verdict.verdict == FAIL and not verdict.decided_by
    _, real = _table54(tmp_path / "b", monkeypatch, _rows(-0.05))
    assert yaml.safe_load(real).get("replica_work", "real") == "real"
