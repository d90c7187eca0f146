"""UNDECIDED is never a pass (issue 34): the run's verdict, its exit code, the Python API's
verdict and the pytest item agree; an `exploratory` check's UNDECIDED is an xfail in pytest."""

from __future__ import annotations

from pathlib import Path

from testbed.api import Result
from testbed.judge.outcome import FAIL, PASS, UNDECIDED, Outcome
from testbed.judge.syntax import parse
from testbed.judge.verdict import EXIT_CODES, run_verdict
from testbed.scenario.runner import RunResult


def _o(verdict: str, decided_by: str = "more requests", exploratory: bool = False) -> Outcome:
    return Outcome("x", verdict, 1.0, 2.0, "why", decided_by if verdict == UNDECIDED else "",
                   exploratory)


def test_a_run_with_an_undecided_check_exits_2_a_fail_1_a_pass_0():
    assert EXIT_CODES[run_verdict([_o(PASS), _o(UNDECIDED)]).verdict] == 2
    assert run_verdict([_o(UNDECIDED), _o(FAIL)]).exit_code == 1
    assert run_verdict([_o(PASS)]).exit_code == 0
    assert run_verdict([_o(PASS), _o(UNDECIDED)], allow_undecided=True).verdict == PASS
    assert run_verdict([_o(UNDECIDED, decided_by="")]).verdict == FAIL  # a cell without data


def test_run_result_and_the_api_agree():
    outcomes = [_o(PASS), _o(UNDECIDED)]
    run = RunResult(Path("."), [], outcomes)
    assert run.verdict().verdict == UNDECIDED and not run.passed
    assert Result(Path("."), [], outcomes).verdict == UNDECIDED
    assert RunResult(Path("."), [], [_o(PASS)]).passed


def test_pytest_fails_an_undecided_check_and_xfails_only_an_exploratory_one():
    # the pytest item fails on `failing` and xfails on `allowed_undecided` (test_one_verdict)
    v = run_verdict([_o(PASS), _o(UNDECIDED)])
    assert [o.verdict for o in v.failing] == [UNDECIDED] and not v.allowed_undecided
    v = run_verdict([_o(PASS), _o(UNDECIDED, exploratory=True)])
    assert v.verdict == PASS and not v.failing and len(v.allowed_undecided) == 1
    v = run_verdict([_o(FAIL, exploratory=True)])
    assert v.verdict == FAIL and v.failing  # exploratory never excuses a FAIL


def test_exploratory_is_a_suffix_of_the_line():
    assert parse("requests[service=imgcls] > 10 exploratory").exploratory
    assert not parse("requests[service=imgcls] > 10").exploratory
