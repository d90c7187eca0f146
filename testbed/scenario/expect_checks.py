"""The load-time checks of a scenario's `expect:` lines against the scenario itself: each line
reads (testbed.judge.syntax), names known metrics, selects keys and values that its results can
have, divides by no constant zero, and matches some row of some matrix cell."""

from __future__ import annotations

import itertools
from typing import Any

from testbed.judge.syntax import (
    CHAIN_METRICS,
    FIXED_KEYS,
    METRICS,
    SLICE_METRICS,
    ExpectSyntaxError,
    Term,
    constant,
    matches,
    norm,
    parse,
)
from testbed.scenario.spec import Scenario

__all__ = ["check_expectations", "check_selectors_match", "skeleton_rows"]


def check_expectations(scn: Scenario, slices: list[str] | None = None) -> list[tuple[tuple, str]]:
    """Syntax, metrics, selector keys and values (a service, slice, repetition or matrix value
    that no row can have), and division by a constant zero.

    scn: the scenario; slices: the testbed's slice names."""
    problems = []
    keys = FIXED_KEYS | set(scn.matrix)
    values: dict[str, set[str]] = {k: {norm(v) for v in vs} for k, vs in scn.matrix.items()}
    values.setdefault("service", {norm(s.name) for s in scn.services})
    values["rep"] = {norm(r) for r in range(scn.repetitions)}
    if slices is not None:
        values["slice"] = {norm(s) for s in slices}
    for i, text in enumerate(scn.expect):
        try:
            check = parse(text)
        except ExpectSyntaxError as exc:
            problems.append((("expect", i), str(exc)))
            continue
        for term in check.terms():
            if term.metric not in METRICS:
                problems.append((("expect", i), f"unknown metric {term.metric!r} "
                                 f"(metrics: {', '.join(METRICS)})"))
            for k, v in term.selectors:
                if k not in keys:
                    problems.append((("expect", i), f"unknown selector {k!r} in {term} "
                                     f"(keys: {', '.join(sorted(keys))})"))
                elif k in values and norm(v) not in values[k]:
                    problems.append((("expect", i), f"{k}={v} in {term} matches no result "
                                     f"({k}: {', '.join(sorted(values[k]))})"))
        for side in (check.left, check.right):
            zero = _constant_zero_divisor(side)
            if zero is not None:
                problems.append((("expect", i), f"division by zero: the divisor {zero} is always 0"))
    return problems




def _constant_zero_divisor(node: Any) -> str | None:
    if isinstance(node, float | Term):
        return None
    if node[0] == "neg":
        return _constant_zero_divisor(node[1])
    if node[0] == "/" and constant(node[2]) == 0:
        return _show(node[2])
    return _constant_zero_divisor(node[1]) or _constant_zero_divisor(node[2])


def _show(node: Any) -> str:
    if isinstance(node, float):
        return f"{node:g}"
    if isinstance(node, Term):
        return str(node)
    if node[0] == "neg":
        return f"-{_show(node[1])}"
    return f"({_show(node[1])} {node[0]} {_show(node[2])})"




def skeleton_rows(cells: list[Any], repetitions: int, engine: str) -> list[dict[str, Any]]:
    """The keys of every result row a run of these matrix cells (testbed.scenario.matrix.Cell)
    will have, without values: what a selector can match.

    cells: the matrix cells; repetitions: per cell; engine: "testbed" or "sim"."""
    rows = []
    for cell, rep in itertools.product(cells, range(repetitions)):
        base = {k: v for k, v in cell.params.items() if k not in ("service", "slice")}
        base["rep"] = rep
        rows += [{**base, "service": s.name, "_kind": "service"} for s in cell.scenario.services]
        if engine == "sim":
            rows += [{**base, "pipeline": "->".join(p.services), "_kind": "chain"}
                     for p in cell.scenario.pipelines]
        else:
            rows += [{**base, "slice": c.slice, "_kind": "slice"} for c in cell.scenario.cross_traffic]
    return rows


def _row_has(row: dict[str, Any], metric: str) -> bool:
    kind = row["_kind"]
    if metric in SLICE_METRICS:
        return kind == "slice"
    if kind == "chain":
        return metric in CHAIN_METRICS
    return kind == "service" and metric not in CHAIN_METRICS - {"requests"}


def check_selectors_match(scn: Scenario, cells: list[Any]) -> list[tuple[tuple, str]]:
    """A term whose selectors match no row any cell of the matrix will have (a combination of
    valid values that never occurs together, a slice metric asked of a service, ...).

    scn: the scenario; cells: its matrix cells."""
    skeleton = skeleton_rows(cells, scn.repetitions, scn.engine)
    problems = []
    for i, text in enumerate(scn.expect):
        for term in parse(text).terms():
            if not any(_row_has(r, term.metric) and matches(r, term.selectors) for r in skeleton):
                problems.append((("expect", i), f"{term} matches no cell of the matrix (cells: "
                                 + "; ".join(c.label for c in cells) + ")"))
    return problems
