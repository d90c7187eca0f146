"""One verdict (issue 45): the same results fed to every caller that states a run's verdict —
`testbed judge` (the CLI's exit code, as `testbed run`'s), the Python API's `Result.verdict`, the
pytest plugin's `expect` item, the report and `reproduce`'s artefact verdict — give one answer.
A problem that leaves every cell ok does not fail a run; a failed cell does, read or not."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.api import Result
from testbed.cli import main
from testbed.judge.outcome import evaluate_all
from testbed.judge.verdict import EXIT_CODES, run_verdict
from testbed.pytest_plugin import ExpectFailed, MachineBehind, ScenarioExpectItem
from testbed.report.build import build_document
from testbed.reproduce.slicing import combine
from testbed.scenario.rundir import write_manifest
from testbed.scenario.runner import RunResult

CHECKS = ["mean_replicas[service=imgcls] >= 2", "requests[service=imgcls] >= 100"]
EXPLORATORY = "slo_violation_rate[service=imgcls] <= 0.01 exploratory"
SIZED = "slo_violation_rate[service=imgcls] <= 0.01"


def _row(service: str = "imgcls", *, status: str = "ok", cell: str = "00-a", late: int = 0,
         n: int = 400, replicas: float = 3.0) -> dict:
    return {"cell": cell, "rep": 0, "status": status, "service": service, "requests": n, "ok": n,
            "errors": 0, "violations": late, "slo_violation_rate": late / n,
            "mean_latency_ms": 200.0, "latency_sd_ms": 50.0, "p50_latency_ms": 190.0,
            "p99_latency_ms": 400.0, "mean_sched_latency_ms": 205.0, "throughput_rps": n / 60,
            "mean_replicas": replicas, "reward": None}


# name: (expect lines, rows, problems, the one answer)
CASES = {
    "a problem that leaves the cells ok passes": (
        CHECKS, [_row()], ["simulator comparison skipped: no traces"], "PASS"),
    "a failed check fails": (CHECKS, [_row(replicas=1.0)], [], "FAIL"),
    "a failed cell fails though no check reads it": (
        CHECKS, [_row(), _row("tts", status="failed", cell="01-b")], ["cell 01 lost 3 requests"],
        "FAIL"),
    "a check this size cannot decide is undecided": (SIZED, [_row(late=2, n=100)], [], "UNDECIDED"),
    "an exploratory undecided check does not fail": (
        [*CHECKS, EXPLORATORY], [_row(late=2, n=100)], [], "PASS"),
    # the machine's figures: a check over them is never a pass, nor the product's FAIL
    "a check over a cell the machine fell behind in is machine behind": (
        CHECKS, [_row(status="behind", replicas=1.0)], ["imgcls: its replicas were starved"],
        "MACHINE BEHIND"),
    "a check that fails over clean cells fails beside a behind cell": (
        ["mean_replicas[service=tts] >= 2"],
        [_row(status="behind"), _row("tts", cell="01-b", replicas=1.0)], [], "FAIL"),
    "a behind cell no check reads decides nothing": (
        ["mean_replicas[service=tts] >= 2"],
        [_row(status="behind"), _row("tts", cell="01-b")], [], "PASS"),
}


def _run_dir(tmp_path: Path, checks: list[str], rows: list[dict], problems: list[str]) -> Path:
    outcomes = evaluate_all(checks, rows)
    (tmp_path / "results.json").write_text(json.dumps(
        {"rows": rows, "expect": [o.__dict__ for o in outcomes], "interrupted": False,
         "problems": problems}))
    write_manifest(tmp_path, scenario={"name": "one-verdict", "duration_s": 10, "time_scale": 1.0,
                                       "repetitions": 1, "seed": 0, "expect": checks},
                   testbed={}, source="one-verdict.yaml", base_dir=tmp_path, profile="local",
                   overrides={})
    (tmp_path / "cells").mkdir()
    return tmp_path


def _cli(run_dir: Path) -> str:
    code = main(["judge", str(run_dir)])
    return {v: k for k, v in EXIT_CODES.items()
            if k in ("PASS", "FAIL", "UNDECIDED", "MACHINE BEHIND")}[code]


def _pytest_item(run_dir: Path, result: RunResult) -> str:
    item = SimpleNamespace(
        parent=SimpleNamespace(get_run=lambda: SimpleNamespace(finish=lambda: result)),
        config=SimpleNamespace(getoption=lambda name: False), user_properties=[],
        add_report_section=lambda *a: None)
    try:
        ScenarioExpectItem.runtest(item)  # type: ignore[arg-type]
    except (ExpectFailed, MachineBehind) as exc:
        return str(exc).split(":")[0]
    except pytest.xfail.Exception:
        return "PASS"  # an xfail: pytest exits 0 on it
    return "PASS"


def _report(run_dir: Path) -> str:
    text = build_document(run_dir).markdown(run_dir)
    return text.split("Run verdict: **")[1].split("**")[0]


@pytest.mark.parametrize("case", list(CASES))
def test_every_caller_gives_the_same_verdict(tmp_path, case):
    checks, rows, problems, want = CASES[case]
    checks = [checks] if isinstance(checks, str) else checks
    run_dir = _run_dir(tmp_path, checks, rows, problems)
    outcomes = evaluate_all(checks, rows)
    result = RunResult(run_dir, rows, outcomes, False, problems)
    answers = {
        "rule": run_verdict(outcomes, rows).verdict,
        "cli": _cli(run_dir),
        "api": Result(run_dir, rows, outcomes, False, problems).verdict,
        "run result": result.verdict().verdict,
        "pytest": _pytest_item(run_dir, result),
        "report": _report(run_dir),
        "reproduce": combine(outcomes, rows),
    }
    assert answers == dict.fromkeys(answers, want), case


def test_no_checks_is_not_judged_and_exits_0_unless_a_cell_failed():
    assert run_verdict([], [_row()]).verdict == "NOT JUDGED"
    assert run_verdict([], [_row()]).exit_code == 0
    assert Result(Path("."), [_row()], [], False, ["a plot could not be drawn"]).verdict == "NOT JUDGED"
    assert run_verdict([], [_row(status="failed")]).verdict == "FAIL"
    assert run_verdict([], [_row()], interrupted=True).exit_code == 130


@pytest.mark.parametrize("cells_pass, decided_by, checks, want", [
    (True, "", [("ordering", True, "")], "PASS"),
    (False, "", [("ordering", True, "")], "FAIL"),  # a cell outside its tolerance
    (False, "the whole day", [("ordering", True, "")], "PASS"),  # cells not judged at this size
    (True, "the whole day", [("ordering", False, "a longer window")], "NOT RUN"),
    (True, "", [("ordering", False, "")], "FAIL"),
])
def test_reproduces_tables_and_sim_tables_exit_are_the_one_rules(cells_pass, decided_by, checks,
                                                                 want):
    """reproduce's tables (and `testbed sim tables`' exit over them) judge their cells and
    checks as Outcomes through run_verdict: they had a rule of their own."""
    from testbed.reproduce.tables import Cell, Check, TableResult

    cell = Cell("imgcls", "rule_v2", {"reward": -0.02}, {"reward": -0.03}, passed=cells_pass)
    table = TableResult("5.4", "t", [cell], checks=[Check(t, p, "", d) for t, p, d in checks],
                        decided_by=decided_by)
    assert table.verdict == run_verdict(table.outcomes()).verdict == want
    assert EXIT_CODES[table.verdict] == (1 if want == "FAIL" else 0)
