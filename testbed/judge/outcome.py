"""Each `expect:` check's outcome (testbed.judge.syntax) over a run's result rows: PASS, FAIL or
UNDECIDED, decided by the data (testbed.judge.stats).

A check over SLO violation rates and mean latencies, linear in its terms or a ratio against a
number, is judged on the (1 - 2 ALPHA) interval of its margin to the bound, with each cell's
sampling variance (independent or batch-means, the larger):
- one-sided (<, <=, >, >=): wholly on the passing side PASS, wholly on the failing side FAIL;
  across the bound it is decided by its effect (the line's `effect E`, else the bound's distance
  from no difference): a limit that no difference meets (`rate <= 0.01`) PASSes when a miss of E
  is ruled out; a claim of an effect (`off >= 1.2 * on`, `A > B effect 0.02`) FAILs when an effect
  of E is ruled out. Else UNDECIDED, with the size that decides it.
- `A ~= B within M` ("no difference within M"): two one-sided tests, PASS only when the interval
  lies inside +-M, FAIL when it lies wholly outside, else UNDECIDED.
UNDECIDED is never a pass: `testbed run` exits 2 on it (1 on FAIL; the run's verdict is
testbed.judge.verdict's). A term over a cell that got
no requests or whose status is not ok is UNDECIDED with no size that decides it (exit 1); over a
cell the machine fell behind in (status "behind": its clients late, its replicas starved of a
core by other work) and no failed one, MACHINE BEHIND (never a pass; exit 3).
Bounds on other metrics (p99, throughput, replicas, simulator rows) are plain comparisons.

"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from testbed.judge.stats import (
    decide_equivalence,
    decide_one_sided,
    estimate,
    needed_se,
    value,
    zone,
)
from testbed.judge.syntax import COMPARISONS, Check, matches, parse

__all__ = ["FAIL", "MACHINE_BEHIND", "NOT_RUN", "PASS", "UNDECIDED", "Outcome", "evaluate",
           "evaluate_all", "recorded_outcomes"]

PASS, FAIL, UNDECIDED = "PASS", "FAIL", "UNDECIDED"
MACHINE_BEHIND = "MACHINE BEHIND"  # a check over cells whose figures are the machine's
NOT_RUN = "NOT RUN"  # `testbed reproduce`: a figure this size cannot be judged against (exit 0)


@dataclass(frozen=True)
class Outcome:
    """One check's verdict over a run's rows: PASS, FAIL or UNDECIDED, the two sides' values, why,
    and the size that would decide it."""
    text: str
    verdict: str  # PASS, FAIL, UNDECIDED or MACHINE BEHIND
    left: float | None
    right: float | None
    detail: str = ""
    # UNDECIDED because the run is too small to tell: the size that decides it
    decided_by: str = ""
    exploratory: bool = False  # the line says `exploratory`: pytest reports its UNDECIDED as xfail

    @property
    def passed(self) -> bool:
        """The verdict is PASS."""
        return self.verdict == PASS

    @property
    def fails_run(self) -> bool:
        """FAIL, or UNDECIDED for a reason other than the run's size (no requests, failed cell):
        what makes a run exit 1 (an UNDECIDED at this size makes it exit 2)."""
        return self.verdict == FAIL or (self.verdict == UNDECIDED and not self.decided_by)

    def explain(self) -> str:
        """The figures and the reason, as the terminal, pytest and the reports show them."""
        values = (f"{self.left:.4g} vs {self.right:.4g}"
                  if self.left is not None and self.right is not None else "")
        parts = [p for p in (values, self.detail) if p]
        if self.decided_by:
            parts.append(f"decided by: {self.decided_by}")
        return "; ".join(parts)


def evaluate(check: Check, rows: list[dict[str, Any]]) -> Outcome:
    """The verdict of one parsed check over a run's result rows.

    check: from parse(); rows: testbed.scenario.results rows (results.json's `rows`)."""
    unusable, machine = _unusable_cells(check, rows)
    if unusable:
        return _outcome(check, UNDECIDED, None, None, unusable)
    if machine:
        return _outcome(check, MACHINE_BEHIND, None, None, machine)
    try:
        left, right = value(check.left, rows), value(check.right, rows)
    except LookupError as exc:
        return _outcome(check, FAIL, None, None, str(exc))
    est = estimate(check, rows) if check.op not in ("==", "!=") else None
    if est is None:  # a plain comparison: no chance in these figures
        met = (abs(left - right) <= (check.within or 0.0) if check.op == "~="
               else COMPARISONS[check.op](left, right))
        return _outcome(check, PASS if met else FAIL, left, right)
    if check.op == "~=":
        assert check.within is not None
        verdict, why = decide_equivalence(est, check.within)
    else:
        z = zone(check)
        if z.effect is None:
            return _outcome(check, UNDECIDED, left, right,
                            "states no effect and its bound gives none (add `effect E`)")
        verdict, why = decide_one_sided(est, z)
    decided_by = _size_that_decides(check, est.se) if verdict == UNDECIDED else ""
    return _outcome(check, verdict, left, right, why, decided_by)


def _outcome(check: Check, verdict: str, left: float | None, right: float | None,
             detail: str = "", decided_by: str = "") -> Outcome:
    return Outcome(check.text, verdict, left, right, detail, decided_by, check.exploratory)


def _size_that_decides(check: Check, se: float) -> str:
    """How many times this run's requests per cell would decide the check (se falls as 1/sqrt(n))."""
    need = needed_se(check)
    if not need or se <= need:
        return "a run whose figures sit farther from the bound (this interval is at its edge)"
    return (f"about {(se / need) ** 2:.1f} x these requests per cell (a longer cell): standard "
            f"error {se:.3g}, decided at {need:.3g}")


def evaluate_all(texts: list[str], rows: list[dict[str, Any]]) -> list[Outcome]:
    """Each of `texts` (`expect:` lines) parsed and judged over `rows` (results.json's rows), in
    order."""
    return [evaluate(parse(t), rows) for t in texts]


def _unusable_cells(check: Check, rows: list[dict[str, Any]]) -> tuple[str, str]:
    """Why the rows a check reads cannot decide it: a cell whose status is not ok (it lost
    requests to something other than the service), or a service that got no requests; and,
    apart, the cells the machine fell behind in (status "behind")."""
    why: list[str] = []
    machine: list[str] = []
    for term in check.terms():
        for r in rows:
            if term.metric not in r or not matches(r, term.selectors):
                continue
            where = f"cell {r.get('cell', '?')} rep {r.get('rep', '?')}"
            if r.get("status") == "behind":
                machine.append(f"{where}: the machine fell behind (its figures are the host's, "
                               "not the product's)")
            elif r.get("status") not in (None, "ok"):
                lost = f", lost {r['lost']} requests" if r.get("lost") else ""
                why.append(f"{where} {r['status']}{lost}: its results cannot decide")
            elif "service" in r and r.get("requests") == 0:
                why.append(f"{where}: no {r['service']} requests")
    return "; ".join(dict.fromkeys(why)), "; ".join(dict.fromkeys(machine))


def recorded_outcomes(record: dict[str, Any] | None, texts: list[str]) -> list[Outcome]:
    """The verdicts a run's record (results.json) holds, when they are of these `expect:` lines;
    else [] (the report and the live page judge the rows again, or show none).

    record: the run's record, or None; texts: the scenario's `expect:` lines."""
    recorded = (record or {}).get("expect") or []
    if [o.get("text") for o in recorded if isinstance(o, dict)] != list(texts) or not texts:
        return []
    names = {f.name for f in dataclasses.fields(Outcome)}
    return [Outcome(**{k: v for k, v in o.items() if k in names}) for o in recorded]
