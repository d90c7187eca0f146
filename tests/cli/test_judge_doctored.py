"""`testbed judge RUN_DIR --scenario FILE` on doctored copies of slicing-ci's results (issue 34):
450 imgcls requests and 150 per TTS/chatbot cell, with the spreads docs/slicing.md reports.
Each doctored run must exit non-zero; the healthy one at the size slicing-ci plans exits 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "slicing-ci.yaml"


def _row(service: str, on: bool, n: int, late: int, mean: float, sd: float) -> dict:
    return {"service": service, "slicing": "on" if on else "off", "iperf_flows": 40,
            "cell": f"{service}-{'on' if on else 'off'}", "rep": 0, "status": "ok",
            "requests": n, "ok": n, "violations": late, "slo_violation_rate": late / n,
            "mean_latency_ms": mean, "latency_sd_ms": sd}


def _healthy(imgcls: int = 450, other: int = 150) -> list[dict]:
    return [_row("imgcls", True, imgcls, 0, 97.0, 20.0),
            _row("imgcls", False, imgcls, round(imgcls * 0.064), 283.0, 300.0),
            _row("tts", True, other, 0, 366.0, 60.0), _row("tts", False, other, 0, 388.0, 60.0),
            _row("chatbot", True, other, 0, 280.0, 81.0),
            _row("chatbot", False, other, 0, 283.0, 81.0)]


def _doctor(rows: list[dict], i: int, **change) -> list[dict]:
    rows[i].update(change)
    if "violations" in change:
        rows[i]["slo_violation_rate"] = change["violations"] / rows[i]["requests"]
    return rows


DOCTORED = {
    "imgcls only 1.1x slower without the slice": lambda r: _doctor(
        r, 1, mean_latency_ms=97.0 * 1.1, latency_sd_ms=200.0, violations=3),
    "the slice makes imgcls's SLO worse (4 late vs 0)": lambda r: _doctor(
        _doctor(r, 1, violations=0), 0, violations=4),
    "sliced imgcls 2 % late (bound 1 %)": lambda r: _doctor(r, 0, violations=9),
    "TTS 37 % slower without the slice": lambda r: _doctor(r, 3, mean_latency_ms=366.0 * 1.37),
    "chatbot 16 % slower without the slice": lambda r: _doctor(r, 5, mean_latency_ms=280.0 * 1.16),
}


def _judge(tmp_path: Path, rows: list[dict], *extra: str) -> int:
    (tmp_path / "results.json").write_text(json.dumps({"rows": rows, "expect": [],
                                                       "interrupted": False, "problems": []}))
    return main(["judge", str(tmp_path), "--scenario", str(SCENARIO), *extra])


@pytest.mark.parametrize("case", list(DOCTORED))
def test_every_doctored_run_exits_non_zero(tmp_path, capsys, case):
    code = _judge(tmp_path, DOCTORED[case](_healthy()))
    out = capsys.readouterr().out
    assert code != 0, out
    assert "PASS (" not in out  # never a green banner


def test_the_healthy_run_at_the_planned_size_passes_and_judges_print_the_table(tmp_path, capsys):
    assert _judge(tmp_path, _healthy(imgcls=780, other=260)) == 0
    out = capsys.readouterr().out
    assert "Expectations" in out and "PASS" in out


def test_undecided_exits_2_and_allow_undecided_exits_0(tmp_path, capsys):
    rows = DOCTORED["sliced imgcls 2 % late (bound 1 %)"](_healthy())
    assert _judge(tmp_path, rows) == 2
    assert "UNDECIDED" in capsys.readouterr().out
    assert _judge(tmp_path, rows, "--allow-undecided") == 0


def test_a_fail_exits_1(tmp_path):
    rows = DOCTORED["TTS 37 % slower without the slice"](_healthy(imgcls=780, other=260))
    assert _judge(tmp_path, rows) == 1


def test_judge_without_results_is_one_line(tmp_path, capsys):
    assert main(["judge", str(tmp_path)]) != 0
    assert "no results.json" in capsys.readouterr().err
