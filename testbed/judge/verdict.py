"""A run's verdict, decided here and nowhere else: `testbed run`/`judge` (its banner and exit code),
the Python API (`Result.verdict`), the pytest plugin's `expect` item, the report and `reproduce`
all call `run_verdict` on the same three things: the checks' outcomes, the result rows and whether
the run was interrupted.

The rule:
- FAIL when a check FAILs or reads a cell without data (`Outcome.fails_run`), when a cell failed
  (its status is not ok: lost requests, metric sources that disagree) whether a check reads it or
  not, or when the run was interrupted;
- else MACHINE BEHIND when a check reads a cell whose figures are the machine's (status "behind":
  its clients fell behind their schedule, or its replicas were starved of a core by other work):
  never a pass, exit 3 (a behind cell no check reads is listed, and decides nothing);
- else UNDECIDED when a check is undecided at this size and the line is not `exploratory` (never a
  pass; with `allow_undecided`, exploration, it counts as PASS);
- else PASS; NOT RUN when every check is NOT RUN (`reproduce`: a figure this size is not judged
  against, listed apart: exit 0, never a pass), a NOT RUN beside decided checks listed apart;
  NOT JUDGED when the run had no checks (exit 0 too).
A problem that leaves every cell `ok` ("simulator comparison skipped", a plot that could not be
drawn) is reported beside the verdict and does not fail the run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from testbed.judge.outcome import FAIL, MACHINE_BEHIND, NOT_RUN, PASS, UNDECIDED, Outcome

__all__ = ["EXIT_CODES", "INTERRUPTED_EXIT", "MACHINE_BEHIND", "NOT_JUDGED", "Verdict",
           "behind_cells", "failed_cells", "run_verdict", "worst"]

NOT_JUDGED = "NOT JUDGED"  # a run with no `expect:` checks and no failed cell
EXIT_CODES = {PASS: 0, NOT_JUDGED: 0, NOT_RUN: 0, FAIL: 1, UNDECIDED: 2, MACHINE_BEHIND: 3}
INTERRUPTED_EXIT = 130  # Ctrl-C: the report covers what was collected
_RANK = {FAIL: 4, MACHINE_BEHIND: 3, UNDECIDED: 2, PASS: 1, NOT_RUN: 0, NOT_JUDGED: 0}


@dataclass(frozen=True)
class Verdict:
    """A run's verdict (PASS, FAIL, UNDECIDED or NOT JUDGED) and what decided it."""

    verdict: str
    failing: tuple[Outcome, ...] = ()  # the checks that make it FAIL or UNDECIDED
    # UNDECIDED checks that do not fail the run (`exploratory`, or any with allow_undecided):
    # pytest's xfail
    allowed_undecided: tuple[Outcome, ...] = ()
    failed_cells: tuple[str, ...] = ()  # "cell rep N" of each cell that failed
    interrupted: bool = False
    allow_undecided: bool = False
    behind_cells: tuple[str, ...] = ()  # "cell rep N" of each cell the machine fell behind in

    @property
    def passed(self) -> bool:
        """PASS, or NOT JUDGED (no checks, nothing failed): what exits 0."""
        return self.exit_code == 0

    @property
    def exit_code(self) -> int:
        """130 when interrupted, else 1 on FAIL, 3 on MACHINE BEHIND, 2 on UNDECIDED, 0
        otherwise."""
        return INTERRUPTED_EXIT if self.interrupted else EXIT_CODES[self.verdict]


def failed_cells(rows: Iterable[Any]) -> list[str]:
    """The cells (and repetitions) whose rows say they failed: lost requests, or metric sources
    that disagree (`CellRunner.fail`); a "planned" cell (the lab's --check) has not failed.

    rows: results.json's rows (testbed.scenario.results)."""
    return list(dict.fromkeys(f"{r.get('cell')} rep {r.get('rep')}" for r in rows
                              if isinstance(r, dict)
                              and r.get("status") not in (None, "ok", "planned", "behind")))


def behind_cells(rows: Iterable[Any]) -> list[str]:
    """The cells (and repetitions) whose figures are the machine's (status "behind").

    rows: results.json's rows."""
    return list(dict.fromkeys(f"{r.get('cell')} rep {r.get('rep')}" for r in rows
                              if isinstance(r, dict) and r.get("status") == "behind"))


def run_verdict(outcomes: Iterable[Outcome], rows: Iterable[Any] = (), *, interrupted: bool = False,
                allow_undecided: bool = False) -> Verdict:
    """The run's verdict by the module's rule.

    outcomes: each `expect:` check's Outcome; rows: the run's result rows (a failed cell among
    them fails the run); interrupted: the run was cut short; allow_undecided: an UNDECIDED check
    (at this size) counts as a pass, for exploration."""
    outcomes = list(outcomes)
    rows = list(rows)
    failed = tuple(failed_cells(rows))
    behind = tuple(behind_cells(rows))
    undecided = [o for o in outcomes if o.verdict == UNDECIDED and not o.fails_run]
    hard = [o for o in outcomes if o.fails_run]
    machine = [o for o in outcomes if o.verdict == MACHINE_BEHIND]
    sized = [o for o in undecided if not o.exploratory and not allow_undecided]
    allowed = tuple(o for o in undecided if o.exploratory or allow_undecided)
    judged = [o for o in outcomes if o.verdict != NOT_RUN]
    if hard or failed or interrupted:
        verdict, failing = FAIL, tuple(hard + sized)
    elif machine:
        verdict, failing = MACHINE_BEHIND, tuple(machine + sized)
    elif sized:
        verdict, failing = UNDECIDED, tuple(sized)
    elif outcomes and not judged:
        verdict, failing = NOT_RUN, ()
    else:
        verdict, failing = (PASS if outcomes else NOT_JUDGED), ()
    return Verdict(verdict, failing, allowed, failed, interrupted, allow_undecided, behind)


def worst(verdicts: Iterable[str]) -> str:
    """The verdict of a whole made of parts (`reproduce`'s artefacts): FAIL over UNDECIDED over
    PASS; NOT RUN and NOT JUDGED count as no verdict (PASS when every part is one of them).

    verdicts: each part's verdict word."""
    ranked = max(verdicts, key=lambda v: _RANK[v], default=PASS)
    return PASS if _RANK[ranked] == 0 else ranked
