"""UNDECIDED is never a pass (issue 34): the run's verdict, its exit code, the Python API's
verdict and the pytest item agree; an `exploratory` check's UNDECIDED is an xfail in pytest."""

from __future__ import annotations

from pathlib import Path

from testbed.api import Result
from testbed.pytest_plugin import expect_verdict
from testbed.scenario.expect import EXIT_CODES, FAIL, PASS, UNDECIDED, Outcome, parse, run_verdict
from testbed.scenario.runner import RunResult


def _o(verdict: str, decided_by: str = "more requests", exploratory: bool = False) -> Outcome:
    return Outcome("x", verdict, 1.0, 2.0, "why", decided_by if verdict == UNDECIDED else "",
                   exploratory)


def test_a_run_with_an_undecided_check_exits_2_a_fail_1_a_pass_0():
    assert EXIT_CODES[run_verdict([_o(PASS), _o(UNDECIDED)])] == 2
    assert EXIT_CODES[run_verdict([_o(UNDECIDED), _o(FAIL)])] == 1
    assert EXIT_CODES[run_verdict([_o(PASS)])] == 0
    assert run_verdict([_o(PASS), _o(UNDECIDED)], allow_undecided=True) == PASS
    assert run_verdict([_o(UNDECIDED, decided_by="")]) == FAIL  # a cell without data


def test_run_result_and_the_api_agree():
    outcomes = [_o(PASS), _o(UNDECIDED)]
    run = RunResult(Path("."), [], outcomes)
    assert run.verdict() == UNDECIDED and not run.passed
    assert Result(Path("."), [], outcomes).verdict == UNDECIDED
    assert RunResult(Path("."), [], [_o(PASS)]).passed


def test_pytest_fails_an_undecided_check_and_xfails_only_an_exploratory_one():
    failing, xfail = expect_verdict([_o(PASS), _o(UNDECIDED)])
    assert [o.verdict for o in failing] == [UNDECIDED] and not xfail
    failing, xfail = expect_verdict([_o(PASS), _o(UNDECIDED, exploratory=True)])
    assert not failing and len(xfail) == 1
    assert run_verdict([_o(PASS), _o(UNDECIDED, exploratory=True)]) == PASS
    failing, _ = expect_verdict([_o(FAIL, exploratory=True)])
    assert failing  # exploratory never excuses a FAIL


def test_exploratory_is_a_suffix_of_the_line():
    assert parse("requests[service=imgcls] > 10 exploratory").exploratory
    assert not parse("requests[service=imgcls] > 10").exploratory
