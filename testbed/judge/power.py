"""A check's power: the smallest effect each `expect:` check over rates and mean latencies decides
at the size a run is planned to have, and whether that size decides it.

Over the rows a run is planned to have (testbed.scenario.plan builds them from the scenario's
cells), a one-term bound on a rate (`rate <= 0.01`) is planned at its bound. The check's standard
error on those rows gives the smallest effect it decides at ALPHA = 0.05 with power 0.95
(testbed.judge.stats.needed_se): 2 z se for a one-sided check, (z + 1.96) se for a margin of no
difference. A check whose effect (stated, or from its bound) is smaller is refused in one line
with the requests per cell that decide it; so is a chance-tested check that states no effect where
its bound gives none. `exploratory` checks are planned, never refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from testbed.judge.stats import Z_EQUIV, Z, estimate, needed_se, zone
from testbed.judge.syntax import Check, Term, constant, matches, parse


@dataclass(frozen=True)
class CheckPlan:
    """One check's size: `detectable` (check units) is the smallest effect (`~=`: margin) it
    decides with power 0.95 at `requests` (the fewest planned requests per cell of its terms);
    `stated` its effect or margin (None: none); `factor`: how many times the planned requests
    decide it (<= 1: decided as planned)."""

    index: int
    check: Check
    detectable: float | None
    stated: float | None
    requests: int
    factor: float

    @property
    def problem(self) -> str:
        """The one line that refuses the check, or '' when the planned size decides it."""
        if self.check.exploratory or self.detectable is None:
            return ""
        if self.stated is None:
            return (f"{self.check.text!r} states no effect and its bound gives none: add "
                    f"'effect E' (the effect it must detect, in its units)")
        if self.factor <= 1.0:
            return ""
        return (f"{self.check.text!r} cannot be decided at {self.requests} requests per cell: it "
                f"detects {self.detectable:.3g} (alpha 0.05, power 0.95), it states "
                f"{self.stated:g}; it needs {math.ceil(self.requests * self.factor)} requests "
                f"per cell")


def plan_checks(expect: list[str], rows: list[dict[str, Any]]) -> list[CheckPlan]:
    """Each chance-tested check's plan over the rows a run is planned to have.

    expect: the `expect:` lines; rows: the planned result rows (testbed.scenario.plan)."""
    out = []
    for i, text in enumerate(expect):
        plan = _plan_one(i, parse(text), rows)
        if plan is not None:
            out.append(plan)
    return out


def _plan_one(index: int, check: Check, rows: list[dict[str, Any]]) -> CheckPlan | None:
    if check.op in ("==", "!="):
        return None
    at = _at_bound(check, rows)
    try:
        est = estimate(check, at)
    except LookupError:
        return None
    if est is None:
        return None
    n = min((r["requests"] for t in check.terms() for r in at
             if matches(r, t.selectors) and t.metric in r), default=0)
    stated = check.within if check.op == "~=" else zone(check).effect
    need = needed_se(check)
    mult = (Z + Z_EQUIV) if check.op == "~=" else 2 * Z
    return CheckPlan(index, check, mult * est.se, stated, n, _factor(check, at, need))


def _factor(check: Check, rows: list[dict[str, Any]], need: float | None) -> float:
    """How many times the planned requests (and violations) the check needs for a standard error
    of at most `need` (bisection: a rate near 0 has se ~ 1/n, a mean ~ 1/sqrt n)."""
    if need is None:
        return math.inf

    def se(f: float) -> float:
        est = estimate(check, [_scaled_row(r, f) for r in rows])
        return est.se if est is not None else math.inf
    if se(1.0) <= need:
        return 1.0
    lo, hi = 1.0, 2.0
    while se(hi) > need:
        lo, hi = hi, hi * 2
        if hi > 1e6:
            return math.inf
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if se(mid) > need else (lo, mid)
    return hi


def _scaled_row(r: dict[str, Any], f: float) -> dict[str, Any]:
    if not r.get("requests"):
        return r
    n = max(1, round(r["requests"] * f))
    return {**r, "requests": n, "ok": n, "violations": round(r["violations"] * f)}


def _at_bound(check: Check, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The planned rows where the check's variance is: a one-term rate bound's rows at the bound;
    a claim that one rate is above another by `effect` with the higher one's rows at its plan
    plus the effect."""
    terms = check.terms()
    rates = all(t.metric == "slo_violation_rate" for t in terms)
    if check.op == "~=" or not rates:
        return rows
    if len(terms) == 1:
        bound = constant(check.right) if isinstance(check.left, Term) else constant(check.left)
        return rows if bound is None else _raise(rows, terms[0], lambda k, n: bound * n)
    z = zone(check)
    if len(terms) == 2 and not z.limit and z.effect and isinstance(check.left, Term):
        higher = check.left if check.op in (">", ">=") else check.right
        if isinstance(higher, Term):
            return _raise(rows, higher, lambda k, n: k + z.effect * n)
    return rows


def _raise(rows: list[dict[str, Any]], term: Term, to: Any) -> list[dict[str, Any]]:
    """`rows` with the violations of those `term` reads raised to to(k, n) (never lowered)."""
    out = []
    for r in rows:
        if matches(r, term.selectors) and r.get("requests"):
            k = max(r["violations"], min(r["requests"], round(to(r["violations"], r["requests"]))))
            r = {**r, "violations": k, "slo_violation_rate": k / r["requests"]}
        out.append(r)
    return out


def plan_table(plans: list[CheckPlan]) -> list[list[str]]:
    """Rows for `testbed run --plan`: the check, its requests per cell, the effect it detects, the
    effect it states, and whether the planned size decides it.

    plans: from `plan_checks`."""
    out = []
    for p in plans:
        what = ("refused" if p.problem else "exploratory, not decided at this size"
                if p.factor > 1 else "decided")
        out.append([p.check.text, str(p.requests),
                    f"{p.detectable:.3g}" if p.detectable is not None else "-",
                    f"{p.stated:g}" if p.stated is not None else "-", what])
    return out
