"""The verdicts of the `expect:` language (testbed.scenario.expect_syntax): each check over a
run's results is PASS, FAIL or UNDECIDED, with a count test or a bound test where chance matters.

A check's verdict is PASS, FAIL or UNDECIDED. UNDECIDED: a term covers a cell that got no
requests or whose status is not ok (both fail the run), or a claim that one violation rate is
above another (`slo_violation_rate[A] > slo_violation_rate[B]`) has too few violations to tell:
that comparison is a count test (one-sided binomial test on the violations of the two sides, at
ALPHA), PASS only when significant, FAIL when A's rate is not above B's and the counts could
have shown it, else "not decided at this size" (which does not fail the run) with the count that
would decide it.

Any other bound (<, <=, >, >=) over SLO violation rates and mean latencies, linear in its terms
or a ratio against a number (`mean[A] / mean[B] <= 1.1`, `rate[A] - rate[B] <= 0.01`,
`mean[A] >= 1.2 * mean[B]`), PASSes when the figures meet it and FAILs only when they miss it
beyond chance: a one-sided z test at ALPHA on the miss, with each cell's sampling variance
(binomial for a rate, with one violation and one on-time request added so that 0/n has some;
s²/n for a mean, requests taken as independent). A miss within chance is "not decided at this
size". Bounds on other metrics are plain comparisons.

The language's public names (`parse`, `Term`, `Check`, `METRICS`, `check_expectations`, ...) live
in testbed.scenario.expect_syntax and are re-exported here, where their importers found them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from testbed.scenario.expect_syntax import (
    _CMP,
    CHAIN_METRICS,
    FIXED_KEYS,
    MAX_CHECK_CHARS,
    MAX_NESTING,
    METRICS,
    SLICE_METRICS,
    Check,
    ExpectSyntaxError,
    Term,
    _constant,
    _matches,
    check_expectations,
    check_selectors_match,
    parse,
    skeleton_rows,
)

__all__ = [
    "ALPHA", "CHAIN_METRICS", "FAIL", "FIXED_KEYS", "MAX_CHECK_CHARS", "MAX_NESTING", "METRICS",
    "PASS", "SLICE_METRICS", "UNDECIDED", "Check", "ExpectSyntaxError", "Outcome", "Term",
    "check_expectations", "check_selectors_match", "evaluate", "evaluate_all", "judge_counts",
    "min_violations", "parse", "skeleton_rows",
]

PASS, FAIL, UNDECIDED = "PASS", "FAIL", "UNDECIDED"
ALPHA = 0.05  # the count test's significance level (one-sided)


@dataclass(frozen=True)
class Outcome:
    text: str
    verdict: str  # PASS, FAIL or UNDECIDED
    left: float | None
    right: float | None
    detail: str = ""
    # UNDECIDED because the run is too small to tell: what would decide it (does not fail a run)
    decided_by: str = ""

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    @property
    def fails_run(self) -> bool:
        """FAIL, or UNDECIDED for a reason other than the run's size (no requests, failed cell)."""
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
    unusable = _unusable_cells(check, rows)
    if unusable:
        return Outcome(check.text, UNDECIDED, None, None, unusable)
    try:
        left, right = _value(check.left, rows), _value(check.right, rows)
    except LookupError as exc:
        return Outcome(check.text, FAIL, None, None, str(exc))
    counted = _count_test(check, rows, left, right)
    if counted is not None:
        return counted
    if _CMP[check.op](left, right):
        return Outcome(check.text, PASS, left, right)
    return _bound_test(check, rows, left, right) or Outcome(check.text, FAIL, left, right)


def evaluate_all(texts: list[str], rows: list[dict[str, Any]]) -> list[Outcome]:
    return [evaluate(parse(t), rows) for t in texts]


def _unusable_cells(check: Check, rows: list[dict[str, Any]]) -> str:
    """Why the rows a check reads cannot decide it: a cell whose status is not ok (it lost
    requests to something other than the service), or a service that got no requests."""
    why: list[str] = []
    for term in check.terms():
        for r in rows:
            if term.metric not in r or not _matches(r, term.selectors):
                continue
            where = f"cell {r.get('cell', '?')} rep {r.get('rep', '?')}"
            if r.get("status") not in (None, "ok"):
                lost = f", lost {r['lost']} requests" if r.get("lost") else ""
                why.append(f"{where} {r['status']}{lost}: its results cannot decide")
            elif "service" in r and r.get("requests") == 0:
                why.append(f"{where}: no {r['service']} requests")
    return "; ".join(dict.fromkeys(why))


def _count_test(check: Check, rows: list[dict[str, Any]], left: float, right: float
                ) -> Outcome | None:
    """`slo_violation_rate[A] > slo_violation_rate[B]` (or <) as a one-sided binomial test on the
    violation counts; None for any other check (or rows without counts)."""
    if check.op not in (">", "<") or not all(
            isinstance(t, Term) and t.metric == "slo_violation_rate"
            for t in (check.left, check.right)):
        return None
    hi, lo = (check.left, check.right) if check.op == ">" else (check.right, check.left)
    counts = []
    for term in (hi, lo):
        matched = [r for r in rows if _matches(r, term.selectors)
                   and isinstance(r.get("violations"), int) and r.get("requests")]
        if not matched:
            return None
        counts.append((sum(r["violations"] for r in matched), sum(r["requests"] for r in matched)))
    (k_hi, n_hi), (k_lo, n_lo) = counts
    verdict, detail, decided_by = judge_counts(k_hi, n_hi, k_lo, n_lo)
    return Outcome(check.text, verdict, left, right, detail, decided_by)


# metric -> the sampling variance of one row's value, or None when the row lacks what it needs
_ROW_VARIANCE = {
    "slo_violation_rate": lambda r: (
        _adjusted(r["violations"], r["requests"]) * (1 - _adjusted(r["violations"], r["requests"]))
        / r["requests"]
        if isinstance(r.get("violations"), int) and r.get("requests") else None),
    "mean_latency_ms": lambda r: (
        r["latency_sd_ms"] ** 2 / r["ok"]
        if r.get("latency_sd_ms") is not None and r.get("ok") else None),
}


def _adjusted(k: int, n: int) -> float:
    """Agresti and Caffo's rate for a variance: one violation and one on-time request added."""
    return (k + 1) / (n + 2)


def _bound_test(check: Check, rows: list[dict[str, Any]], left: float, right: float
                ) -> Outcome | None:
    """A missed bound as a one-sided z test on the miss; None when the check is not a bound
    over rates and means that is linear in its terms (or a ratio against a number)."""
    if check.op not in ("<", "<=", ">", ">="):
        return None
    try:
        diff = _linear(("-", check.left, check.right), rows)
    except (LookupError, ValueError):
        return None
    if diff is None or not diff[0]:
        return None
    coefs, const = diff
    variance = 0.0
    estimate = const
    for (i, metric), c in coefs.items():
        v = _ROW_VARIANCE[metric](rows[i])
        if v is None:
            return None
        variance += c * c * v
        estimate += c * rows[i][metric]
    miss = estimate if check.op in ("<", "<=") else -estimate
    if miss <= 0:  # the rewritten form meets the bound where the figures did not: no test
        return None
    se = math.sqrt(variance)
    p = 0.5 * math.erfc(miss / se / math.sqrt(2)) if se > 0 else 0.0
    if p < ALPHA:
        return Outcome(check.text, FAIL, left, right, f"missed beyond chance (p = {p:.2g})")
    return Outcome(check.text, UNDECIDED, left, right,
                   f"missed but p = {p:.2g} >= {ALPHA:g}: not decided at this size",
                   "more requests per cell (a longer or repeated cell)")


Linear = tuple[dict[tuple[int, str], float], float]


def _linear(node: Any, rows: list[dict[str, Any]]) -> Linear | None:
    """`node` as sum(coef * row's metric) + constant, keyed by (row index, metric): the rows a
    term averages each get 1/m of its coefficient. `X / Y - c` becomes `X - c * Y` (the caller
    compares it with 0, and Y > 0). None when the expression is not of that form or a term is
    not a rate or a mean latency."""
    if isinstance(node, float):
        return {}, node
    if isinstance(node, Term):
        if node.metric not in _ROW_VARIANCE:
            return None
        idx = [i for i, r in enumerate(rows) if _matches(r, node.selectors)
               and r.get(node.metric) is not None]
        if not idx:
            raise LookupError(f"no result matches {node}")
        return {(i, node.metric): 1.0 / len(idx) for i in idx}, 0.0
    if node[0] == "neg":
        return _scaled(-1.0, _linear(node[1], rows))
    op, a, b = node
    for ratio, c, sign in ((a, b, 1.0), (b, a, -1.0)):
        if (op == "-" and isinstance(ratio, tuple) and ratio[0] == "/"
                and _constant(ratio[2]) is None and _constant(c) is not None):
            if _value(ratio[2], rows) <= 0:
                return None
            # X / Y - c  ->  X - c * Y;  c - X / Y  ->  c * Y - X
            return _scaled(sign, _linear(("-", ratio[1], ("*", c, ratio[2])), rows))
    if op in ("+", "-"):
        la, lb = _linear(a, rows), _scaled(1.0 if op == "+" else -1.0, _linear(b, rows))
        if la is None or lb is None:
            return None
        coefs = dict(la[0])
        for key, c in lb[0].items():
            coefs[key] = coefs.get(key, 0.0) + c
        return coefs, la[1] + lb[1]
    ka, kb = _constant(a), _constant(b)
    if op == "*" and (ka is not None or kb is not None):
        return _scaled(ka, _linear(b, rows)) if ka is not None else _scaled(kb, _linear(a, rows))
    if op == "/" and kb:
        return _scaled(1.0 / kb, _linear(a, rows))
    return None


def _scaled(k: float, lin: Linear | None) -> Linear | None:
    return None if lin is None else ({key: k * c for key, c in lin[0].items()}, k * lin[1])


def min_violations(n_hi: int, n_lo: int, alpha: float = ALPHA) -> int:
    """The fewest violations, in the two sides together, at which the count test can reject
    "same rate": all of them on the higher side has probability p0^k under the null."""
    p0 = n_hi / (n_hi + n_lo)
    return math.floor(math.log(alpha) / math.log(p0)) + 1


def judge_counts(k_hi: int, n_hi: int, k_lo: int, n_lo: int, alpha: float = ALPHA
                 ) -> tuple[str, str, str]:
    """(verdict, detail, what decides it) for the claim "the rate k_hi/n_hi is above k_lo/n_lo".
    Under "same rate", given k = k_hi + k_lo violations, k_hi is Binomial(k, n_hi / (n_hi +
    n_lo)); the claim PASSes when P(X >= k_hi) < alpha."""
    k = k_hi + k_lo
    need = min_violations(n_hi, n_lo, alpha)
    shown = f"{k_hi}/{n_hi} vs {k_lo}/{n_lo} violations"
    if k < need:
        return (UNDECIDED, f"{shown}: not decided at this size",
                f"at least {need} violations in the two cells together (one-sided binomial test "
                f"at {alpha:g}); these have {k}")
    if k_hi / n_hi <= k_lo / n_lo:
        return FAIL, f"{shown}: not above", ""
    p0 = n_hi / (n_hi + n_lo)
    p = sum(math.comb(k, j) * p0 ** j * (1 - p0) ** (k - j) for j in range(k_hi, k + 1))
    if p < alpha:
        return PASS, f"{shown} (p = {p:.2g})", ""
    return (UNDECIDED, f"{shown}: above but p = {p:.2g} >= {alpha:g}: not decided at this size",
            "more requests per cell (a longer or repeated cell)")


def _value(node: Any, rows: list[dict[str, Any]]) -> float:
    if isinstance(node, float):
        return node
    if isinstance(node, Term):
        vals = [r[node.metric] for r in rows if _matches(r, node.selectors)
                and r.get(node.metric) is not None]
        if not vals:
            raise LookupError(f"no result matches {node}")
        return sum(vals) / len(vals)
    if node[0] == "neg":
        return -_value(node[1], rows)
    a, b = _value(node[1], rows), _value(node[2], rows)
    if node[0] == "/":
        if b == 0:
            raise LookupError(f"division by zero in {node[2]}")
        return a / b
    return {"+": a + b, "-": a - b, "*": a * b}[node[0]]

