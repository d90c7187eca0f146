"""Power is part of the scenario: at load, each `expect:` check over rates and mean latencies is
sized against the run the scenario plans (testbed.judge.power), and a check this size cannot
decide is refused with the `duration_s` that decides it.

For every matrix cell the planner builds the rows the run will have (testbed.scenario.results),
with the requests each service's clients schedule in the measured window (as the cell records
`planned_requests`) and the service's spread: the scenario's `plan:` (a pilot's figures), else the
profile's processing-time range taken as uniform (mean (a+b)/2, sd (b-a)/sqrt 12) and the share of
it above the SLO (0 of n still has a variance: the judge's Agresti-Caffo adjustment).
`engine: sim` rows carry no counts: their checks are plain comparisons, not planned.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from testbed.clock import ScenarioClock
from testbed.judge import power
from testbed.judge.power import CheckPlan
from testbed.judge.syntax import Term, matches, parse
from testbed.scenario.profiles import scenario_profiles
from testbed.scenario.spec import Scenario

__all__ = ["check_power", "plan_checks", "plan_rows"]


def plan_checks(scn: Scenario, cells: list[Any], base_dir: Path) -> list[CheckPlan]:
    """Each chance-tested check's plan over the matrix cells (testbed.scenario.matrix.Cell).

    scn: the scenario; cells: its expanded cells; base_dir: where its files live."""
    if scn.engine == "sim" or not scn.expect:
        return []
    return power.plan_checks(scn.expect, plan_rows(scn, cells, base_dir))


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




def plan_rows(scn: Scenario, cells: list[Any], base_dir: Path) -> list[dict[str, Any]]:
    """The service rows a run of these cells will have, with planned figures.

    scn: the scenario; cells: its matrix cells; base_dir: its folder (profiles)."""
    from testbed.scenario.cell import load_job  # the cell runner imports the scenario's modules

    rows = []
    for cell in cells:
        cs = cell.scenario
        profiles = scenario_profiles(cs, base_dir)
        planned = {s.name: 0 for s in cs.services}
        for i, c in enumerate(cs.clients):
            offsets = load_job(cs, c, i, 0, base_dir).offsets()
            start = ScenarioClock(cs.time_scale).wall(cs.warmup_s) - 1e-9
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
        if term.metric == service and matches(params, term.selectors) \
                and len(term.selectors) > most:
            best, most = v, len(term.selectors)
    return best
