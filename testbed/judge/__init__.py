"""The judge: the `expect:` language (syntax), the statistics that decide a check (stats), each
check's outcome over a run's rows (outcome), a check's power at a planned size (power) and the
run's one verdict (verdict). It reads result rows only: scenarios, runs and reports call it."""

from testbed.judge.outcome import (
    FAIL,
    MACHINE_BEHIND,
    NOT_RUN,
    PASS,
    UNDECIDED,
    Outcome,
    evaluate,
    evaluate_all,
)
from testbed.judge.syntax import Check, ExpectSyntaxError, Term, parse
from testbed.judge.verdict import EXIT_CODES, NOT_JUDGED, Verdict, run_verdict

__all__ = ["EXIT_CODES", "FAIL", "MACHINE_BEHIND", "NOT_JUDGED", "NOT_RUN", "PASS", "UNDECIDED", "Check",
           "ExpectSyntaxError", "Outcome", "Term", "Verdict", "evaluate", "evaluate_all", "parse",
           "run_verdict"]
