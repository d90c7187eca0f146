"""Every `expect:` line of every shipped scenario can FAIL (and can PASS): for each line, collected
from scenarios/*.yaml and examples/*.yaml so that a new line gets its case, results are built for
every row the scenario's matrix will produce, and the check is fed values until it says FAIL.

The values tried are ones a real run could produce (`REAL`, per metric: a rate in [0, 1], a mean
of replicas between 1 and the pool's units, and a static policy's replicas exactly the scenario's;
no negative latency, no 5000 replicas, and what holds by construction: a routed chain takes at
least its stages' latencies end to end): first the arms equal (every metric the same in every row,
as when the slice or the policy makes no difference), then the rows one side of the check (or one
of its terms) reads at one value and all other rows at another. Each row is a cell that ran
(status ok) at the REAL size the scenario plans: its requests per cell
(testbed.scenario.plan.plan_rows) and the spread the judge plans with (`latency_sd_ms`), so that
the chance tests run as they do on a run: a line FAILs here only where a run of that size can
FAIL it. No scenario is skipped: the paper's traces ship with the package."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.judge.outcome import FAIL, PASS, evaluate
from testbed.judge.syntax import METRICS, Check, Term, matches, parse
from testbed.scenario.expect_checks import _row_has, skeleton_rows
from testbed.scenario.load import load_scenario
from testbed.scenario.matrix import expand
from testbed.scenario.plan import plan_rows

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted([*(ROOT / "scenarios").glob("*.yaml"), *(ROOT / "examples").glob("*.yaml")])
# what a run can produce, per metric (six values each, from low to high)
_RATES = [0.0, 0.004, 0.02, 0.1, 0.5, 1.0]
_MS = [20.0, 100.0, 300.0, 600.0, 1500.0, 8000.0]
_RPS = [0.0, 1.0, 5.0, 20.0, 50.0, 200.0]
REAL: dict[str, list[float]] = {
    "slo_violation_rate": _RATES, "chain_violation_rate": _RATES,
    "mean_latency_ms": _MS, "p50_latency_ms": _MS, "p95_latency_ms": _MS, "p99_latency_ms": _MS,
    "mean_sched_latency_ms": _MS, "mean_e2e_ms": _MS, "p99_e2e_ms": _MS,
    "throughput_rps": _RPS, "on_time_rps": _RPS,
    "requests": [1, 50, 400, 1000, 3000, 20000], "errors": [0, 1, 3, 10, 100, 1000],
    "mean_replicas": [1.0, 1.2, 1.5, 2.0, 3.0, 8.0],  # clipped to the pool's units
    "reward": [-1.0, -0.5, -0.2, -0.1, -0.05, 0.0],
    "iperf_goodput_mbit": [0.0, 1.0, 10.0, 40.0, 80.0, 100.0],
    "replica_probes": [0, 1, 2, 3, 10, 60], "config_mismatches": [0, 0, 1, 2, 5, 20],
    "target_mismatches": [0, 0, 1, 2, 5, 20],
    "mean_share_pct": [12.5, 20.0, 25.0, 37.5, 50.0, 100.0], "mean_batch": [1.0, 1.0, 1.5, 2.0, 4.0, 16.0],
    "mean_stretch": [1.0, 1.02, 1.05, 1.1, 1.3, 2.0], "max_stretch": [1.0, 1.02, 1.05, 1.1, 1.3, 2.0],
}
VALUES = range(6)  # an index into each metric's REAL values
REQUESTS = 1000


def _cases() -> list[Any]:
    out = []
    for path in SHIPPED:
        raw = yaml.safe_load(path.read_text()) or {}
        for i, text in enumerate(raw.get("expect") or []):
            out.append(pytest.param(path, i, text, id=f"{path.stem}-{i}"))
    return out


CASES = _cases()


def test_the_shipped_scenarios_have_expectations_to_check():
    assert len(SHIPPED) >= 8 and len(CASES) >= 40


def _planned(skeleton: list[dict[str, Any]], planned: list[dict[str, Any]] | None
             ) -> list[dict[str, Any] | None]:
    """Each skeleton row's planned figures (requests, ok, latency_sd_ms), None where none."""
    by_key = {}
    for p in planned or []:
        by_key[(p["rep"], p["service"], tuple(sorted((k, str(v)) for k, v in p.items()
                                                      if k not in _PLAN_FIGURES)))] = p
    out = []
    for r in skeleton:
        k = (r["rep"], r.get("service"), tuple(sorted(
            [(k, str(v)) for k, v in r.items() if k not in ("_kind",)] + [("status", "ok")])))
        out.append(by_key.get(k))
    return out


_PLAN_FIGURES = {"requests", "ok", "violations", "slo_violation_rate", "mean_latency_ms",
                 "latency_sd_ms"}


def _rows(skeleton: list[dict[str, Any]], metrics: set[str], value: Any,
          planned: list[dict[str, Any] | None] | None = None, scn: Any = None) -> list[dict[str, Any]]:
    """Result rows: the check's metrics set to REAL[metric][value(row, metric)] as a run of `scn`
    could hold it, every other one fixed (a cell that ran: its planned requests, else REQUESTS, and
    its planned spread); violations match the rate."""
    rows = []
    for i, r in enumerate(skeleton):
        plan = (planned or [None] * len(skeleton))[i]
        row = {k: v for k, v in r.items() if k != "_kind"}
        row.update(cell=f"cell-{i}", status="ok")
        n = plan["requests"] if plan else REQUESTS
        for metric in METRICS:
            if _row_has(r, metric):
                row[metric] = (_real(metric, REAL[metric][value(r, metric)], r, scn)
                               if metric in metrics else n if metric == "requests"
                               else _real(metric, REAL[metric][0], r, scn))
        if "slo_violation_rate" in row and planned is not None:  # simulator rows have no counts
            row["violations"] = round(row["slo_violation_rate"] * row["requests"])
        if plan and "mean_latency_ms" in row:
            row.update(ok=row["requests"], latency_sd_ms=plan["latency_sd_ms"])
        rows.append(row)
    return _by_construction(rows)


def _by_construction(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What no run can hold taken out: a routed chain's mean end-to-end latency is at least the
    sum of its stages' mean latencies in the same cell (each request passes through every stage)."""
    for chain in (r for r in rows if r.get("pipeline") and r.get("mean_e2e_ms") is not None):
        stages = str(chain["pipeline"]).replace("->", ">").split(">")
        same = {k: v for k, v in chain.items() if k not in METRICS and k not in ("pipeline", "cell")}
        floor = sum(r.get("mean_latency_ms") or 0.0 for r in rows if r.get("service") in stages
                    and all(r.get(k) == v for k, v in same.items() if k in r))
        chain["mean_e2e_ms"] = max(chain["mean_e2e_ms"], floor)
    return rows


def _candidates(check: Check, skeleton: list[dict[str, Any]],
                planned: list[dict[str, Any] | None] | None = None, scn: Any = None):
    """Rows for each way of setting the arms: equal first, then one side's, then one term's rows
    apart from the rest (at the planned sizes and spreads where given)."""
    metrics = {t.metric for t in check.terms()}
    groups = [("the left side", _side_terms(check.left)), ("the right side", _side_terms(check.right))]
    groups += [(str(t), [t]) for t in check.terms()]

    for v in VALUES:
        yield f"every metric at its value {v} in every row", _rows(
            skeleton, metrics, lambda r, m, v=v: v, planned, scn)
    for (name, terms), (a, b) in itertools.product(groups, itertools.permutations(VALUES, 2)):
        def value(r: dict[str, Any], m: str, terms=terms, a=a, b=b) -> float:
            return a if any(t.metric == m and matches(r, t.selectors) for t in terms) else b
        yield f"{name}'s rows at value {a}, the rest at {b}", _rows(skeleton, metrics, value,
                                                                      planned, scn)


def _real(metric: str, v: float, row: dict[str, Any], scn: Any) -> float:
    """`v` as a run of `scn` can hold it in this row: a static policy keeps the scenario's
    replicas; no mean of replicas beyond the pool's units."""
    if metric != "mean_replicas" or scn is None:
        return v
    if row.get("policy") == "static":
        replicas = {s.name: s.replicas for s in scn.services}
        return float(row.get("replicas", replicas.get(row.get("service"), 1)))
    return min(v, float(scn.total_units or v))


def _side_terms(node: Any) -> list[Term]:
    if isinstance(node, Term):
        return [node]
    if isinstance(node, tuple):
        return [t for n in node[1:] for t in _side_terms(n)]
    return []


_SIZED: dict[Path, Any] = {}


def _sized(path: Path) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any] | None] | None]:
    """The scenario, its rows' skeleton and their planned figures (None: the simulator's rows),
    once per file."""
    if path not in _SIZED:
        loaded = load_scenario(path)
        scn = loaded.scenario
        cells = expand(scn, loaded.testbed)
        skeleton = skeleton_rows(cells, scn.repetitions, scn.engine)
        planned = (_planned(skeleton, plan_rows(scn, cells, loaded.base_dir))
                   if scn.engine == "testbed" else None)
        _SIZED[path] = scn, skeleton, planned
    return _SIZED[path]


@pytest.mark.parametrize(("path", "index", "text"), CASES)
def test_every_shipped_expectation_can_fail_and_can_pass(path, index, text):
    scn, skeleton, planned = _sized(path)
    assert scn.expect[index] == text
    # the real size: every service row of a testbed run carries its planned requests and spread
    assert planned is None or all(
        p is not None for p, r in zip(planned, skeleton, strict=True) if r["_kind"] == "service")
    check = parse(text)
    verdicts = {}
    for label, rows in _candidates(check, skeleton, planned, scn):
        verdicts.setdefault(evaluate(check, rows).verdict, label)
        if FAIL in verdicts and PASS in verdicts:
            break
    assert FAIL in verdicts, f"no data makes {text!r} fail"
    # an exploratory line is not sized: at this size it may only FAIL or stay UNDECIDED
    assert PASS in verdicts or check.exploratory, f"no data makes {text!r} pass"


def _found(text: str) -> set[str]:
    loaded = load_scenario(ROOT / "scenarios" / "slicing-ci.yaml")
    skeleton = skeleton_rows(expand(loaded.scenario, loaded.testbed), 1, "testbed")
    check = parse(text)
    return {evaluate(check, rows).verdict for _, rows in _candidates(check, skeleton)}


def test_a_check_that_holds_by_construction_is_caught():
    """pipeline-sim's old line: end to end takes longer than the chain's first stage alone."""
    scn, skeleton, planned = _sized(ROOT / "scenarios" / "pipeline-sim.yaml")
    check = parse("mean_e2e_ms[policy=rule_v2] > mean_latency_ms[service=imgcls, policy=rule_v2]")
    assert FAIL not in {evaluate(check, rows).verdict
                        for _, rows in _candidates(check, skeleton, planned, scn)}


def test_a_check_that_cannot_fail_is_caught():
    # a violation rate is never negative: this line would pass on any run
    assert FAIL not in _found("slo_violation_rate[service=imgcls, slicing=off] >= 0")
    assert PASS not in _found("slo_violation_rate[service=imgcls, slicing=off] < 0")
    assert {PASS, FAIL} <= _found("slo_violation_rate[service=imgcls, slicing=off] >= 0.01")
