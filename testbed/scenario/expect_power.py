"""Power is part of the scenario: at load, each `expect:` check over rates and mean latencies is
sized against the run the scenario plans, and a check this size cannot decide is refused.

For every matrix cell the planner builds the rows the run will have (testbed.scenario.results),
with the requests each service's clients schedule in the measured window (as the cell records
`planned_requests`) and the service's spread: the scenario's `plan:` (a pilot's figures), else the
profile's processing-time range taken as uniform (mean (a+b)/2, sd (b-a)/sqrt 12) and the share of
it above the SLO (0 of n still has a variance: the judge's Agresti-Caffo adjustment).
A one-term bound on a rate (`rate <= 0.01`) is planned at its bound. The check's standard error on
those rows gives the smallest effect it decides at ALPHA = 0.05 with power 0.95
(testbed.scenario.expect_stats.needed_se): 2 z se for a one-sided check, (z + 1.96) se for a
margin of no difference. A check whose effect (stated, or from its bound) is smaller is refused in
one line with the requests per cell and the `duration_s` that decide it; so is a chance-tested
check that states no effect where its bound gives none. `exploratory` checks are planned, never
refused. `engine: sim` rows carry no counts: their checks are plain comparisons, not planned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.profiles.registry import load_profiles
from testbed.scenario.expect_stats import Z_EQUIV, Z, estimate, needed_se, zone
from testbed.scenario.expect_syntax import Check, Term, _constant, _matches, parse
from testbed.scenario.spec import Scenario


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


def plan_checks(scn: Scenario, cells: list[Any], base_dir: Path) -> list[CheckPlan]:
    """Each chance-tested check's plan over the matrix cells (testbed.scenario.matrix.Cell).

    scn: the scenario; cells: its expanded cells; base_dir: where its files live."""
    if scn.engine == "sim" or not scn.expect:
        return []
    rows = plan_rows(scn, cells, base_dir)
    out = []
    for i, text in enumerate(scn.expect):
        check = parse(text)
        plan = _plan_one(i, check, rows)
        if plan is not None:
            out.append(plan)
    return out


def check_power(scn: Scenario, cells: list[Any], base_dir: Path) -> list[tuple[tuple, str]]:
    """The load-time problems: one line per check this size cannot decide (with the
    `duration_s` that decides it) or that states no effect where none can be derived.

    scn: the scenario; cells: its matrix cells; base_dir: its folder (profiles)."""
    problems = []
    for p in plan_checks(scn, cells, base_dir):
        if p.problem:
            more = (f", a duration_s of {math.ceil(scn.duration_s * p.factor)} s"
                    if p.stated is not None else "")
            problems.append((("expect", p.index), p.problem + more))
    return problems


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
             if _matches(r, t.selectors) and t.metric in r), default=0)
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
        bound = _constant(check.right) if isinstance(check.left, Term) else _constant(check.left)
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
        if _matches(r, term.selectors) and r.get("requests"):
            k = max(r["violations"], min(r["requests"], round(to(r["violations"], r["requests"]))))
            r = {**r, "violations": k, "slo_violation_rate": k / r["requests"]}
        out.append(r)
    return out


def plan_rows(scn: Scenario, cells: list[Any], base_dir: Path) -> list[dict[str, Any]]:
    """The service rows a run of these cells will have, with planned figures.

    scn: the scenario; cells: its matrix cells; base_dir: its folder (profiles)."""
    from testbed.scenario.cell import load_job  # the cell runner imports the scenario's modules

    rows = []
    for cell in cells:
        cs = cell.scenario
        profiles = load_profiles(base_dir / cs.service_profiles if cs.service_profiles else None)
        planned = {s.name: 0 for s in cs.services}
        for i, c in enumerate(cs.clients):
            offsets = load_job(cs, c, i, 0, base_dir).offsets()
            start = cs.warmup_s / cs.time_scale - 1e-9
            planned[c.service] = planned.get(c.service, 0) + sum(1 for t in offsets if t >= start)
        base = {k: v for k, v in cell.params.items() if k not in ("service", "slice")}
        for rep in range(scn.repetitions):
            for s in cs.services:
                rows.append({**base, "rep": rep, "status": "ok",
                             **_service_plan(scn, s.name, profiles.get(s.name), planned[s.name],
                                             base)})
    return rows


def _service_plan(scn: Scenario, service: str, profile: Any, n: int,
                  params: dict[str, Any]) -> dict[str, Any]:
    """One service's planned figures for `n` requests in a cell with these matrix `params`."""
    lo, hi = profile.proc_time_ms if profile is not None else (0.0, 0.0)
    slo = profile.slo_ms if profile is not None else math.inf
    mean = _pilot(scn.plan.latency_ms, service, params, (lo + hi) / 2)
    sd = _pilot(scn.plan.latency_sd_ms, service, params, (hi - lo) / math.sqrt(12))
    late = max(0.0, hi - max(lo, slo)) / (hi - lo) if hi > lo else float(lo > slo)
    rate = _pilot(scn.plan.violation_rate, service, params, late)
    k = round(rate * n)
    return {"service": service, "requests": n, "ok": n, "violations": k,
            "slo_violation_rate": k / n if n else None, "mean_latency_ms": mean or 1.0,
            "latency_sd_ms": sd}


def _pilot(figures: dict[str, float], service: str, params: dict[str, Any],
           default: float) -> float:
    """A `plan:` figure for the service in a cell: a key `service[key=value, ...]` whose selectors
    the cell's parameters match (the most selectors wins), else `service`, else `default`."""
    best, most = default, -1
    for key, v in figures.items():
        term = parse(f"{key} >= 0").left if "[" in key else Term(key, ())
        if term.metric == service and _matches(params, term.selectors) \
                and len(term.selectors) > most:
            best, most = v, len(term.selectors)
    return best


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
