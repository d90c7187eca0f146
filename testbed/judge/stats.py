"""The statistics behind the `expect:` verdicts (testbed.judge.outcome): a check over rates and
mean latencies as a linear form of its rows' figures, its estimate and standard error in the
check's own units, and the interval rule that decides it.

Units: a ratio check (`X / Y op c`, `X op c * Y`) is read as the ratio X/Y against c (its
difference `X - c*Y` divided by Y); any other check in its terms' units (a rate, a difference of
rates, milliseconds).

Variance of one row's figure (requests that share a fate are not independent): the larger of
the independent figure (a rate: binomial with one violation and one on-time request added,
Agresti and Caffo; a mean: s^2/n) and the batch-means figure the results give
(`slo_violation_batch_se`, `mean_latency_batch_se_ms`: the spread of the means of the cell's
two-second batches, testbed.scenario.results). docs/tolerances.md derives it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from testbed.judge.syntax import Check, Term, constant, matches

ALPHA = 0.05  # each one-sided error of a check (a (1 - 2 ALPHA) interval)
Z = 1.6448536269514722  # the one-sided 0.05 quantile of the normal
Z_EQUIV = 1.959963984540054  # TOST at zero difference passes with power 0.95 when the margin is
#                             (Z + Z_EQUIV) standard errors


def _rate_variance(r: dict[str, Any]) -> float | None:
    k, n = r.get("violations"), r.get("requests")
    if not isinstance(k, int) or not n:
        return None
    p = (k + 1) / (n + 2)  # Agresti and Caffo: 0 of n still has some variance
    return max(p * (1 - p) / n, (r.get("slo_violation_batch_se") or 0.0) ** 2)


def _mean_variance(r: dict[str, Any]) -> float | None:
    sd, n = r.get("latency_sd_ms"), r.get("ok")
    if sd is None or not n:
        return None
    return max(sd * sd / n, (r.get("mean_latency_batch_se_ms") or 0.0) ** 2)


# metric -> the sampling variance of one row's figure, or None when the row lacks what it needs
ROW_VARIANCE = {"slo_violation_rate": _rate_variance, "mean_latency_ms": _mean_variance}

Linear = tuple[dict[tuple[int, str], float], float]


@dataclass(frozen=True)
class Estimate:
    """A check's `left - right` in its own units, with its standard error, and the value it
    would have with no difference (every term equal: ratio 1, difference 0; a single term at 0)."""

    value: float
    se: float
    null: float


def estimate(check: Check, rows: list[dict[str, Any]]) -> Estimate | None:
    """The check's estimate, or None when it is not a linear check over rates and means whose
    rows all carry a variance (then it is a plain comparison).

    check: the parsed line; rows: the run's result rows."""
    try:
        lin = linear(("-", check.left, check.right), rows)
        scale = _scale(check, rows)
    except (LookupError, ValueError, ZeroDivisionError):
        return None
    if lin is None or not lin[0] or scale is None or scale <= 0:
        return None
    coefs, const = lin
    variance, value = 0.0, const
    for (i, metric), c in coefs.items():
        v = ROW_VARIANCE[metric](rows[i])
        if v is None:
            return None
        variance += c * c * v
        value += c * rows[i][metric]
    return Estimate(value / scale, math.sqrt(variance) / scale, null_value(check))


def null_value(check: Check) -> float:
    """`left - right` with no difference: every term 1 (two or more terms: a ratio of 1, a
    difference of 0), or 0 (one term: no violations, no time).

    check: a parsed `expect:` line."""
    one = 1.0 if len(check.terms()) > 1 else 0.0

    def val(node: Any) -> float:
        if isinstance(node, float):
            return node
        if isinstance(node, Term):
            return one
        if node[0] == "neg":
            return -val(node[1])
        a, b = val(node[1]), val(node[2])
        return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else math.inf}[node[0]]
    return val(check.left) - val(check.right)


def _scale(check: Check, rows: list[dict[str, Any]]) -> float | None:
    """What the linear form is divided by to be in the check's units: Y of `X / Y op c` or
    `X op c * Y` (either side), else 1."""
    for a, b in ((check.left, check.right), (check.right, check.left)):
        if constant(b) is not None and isinstance(a, tuple) and a[0] == "/" \
                and constant(a[2]) is None:
            return value(a[2], rows)
        if isinstance(b, tuple) and b[0] == "*" and constant(a) is None:
            for k, y in ((b[1], b[2]), (b[2], b[1])):
                if constant(k) is not None and constant(y) is None:
                    return value(y, rows)
    return 1.0


def linear(node: Any, rows: list[dict[str, Any]]) -> Linear | None:
    """`node` as sum(coef * row's metric) + constant, keyed by (row index, metric): the rows a
    term averages each get 1/m of its coefficient. `X / Y - c` becomes `X - c * Y` (Y > 0).
    None when the expression is not of that form or a term is not a rate or a mean latency.

    node: a parse-tree node; rows: the result rows."""
    if isinstance(node, float):
        return {}, node
    if isinstance(node, Term):
        if node.metric not in ROW_VARIANCE:
            return None
        idx = [i for i, r in enumerate(rows) if matches(r, node.selectors)
               and r.get(node.metric) is not None]
        if not idx:
            raise LookupError(f"no result matches {node}")
        return {(i, node.metric): 1.0 / len(idx) for i in idx}, 0.0
    if node[0] == "neg":
        return _scaled(-1.0, linear(node[1], rows))
    op, a, b = node
    for ratio, c, sign in ((a, b, 1.0), (b, a, -1.0)):
        if (op == "-" and isinstance(ratio, tuple) and ratio[0] == "/"
                and constant(ratio[2]) is None and constant(c) is not None):
            if value(ratio[2], rows) <= 0:
                return None
            return _scaled(sign, linear(("-", ratio[1], ("*", c, ratio[2])), rows))
    if op in ("+", "-"):
        la, lb = linear(a, rows), _scaled(1.0 if op == "+" else -1.0, linear(b, rows))
        if la is None or lb is None:
            return None
        coefs = dict(la[0])
        for key, c in lb[0].items():
            coefs[key] = coefs.get(key, 0.0) + c
        return coefs, la[1] + lb[1]
    ka, kb = constant(a), constant(b)
    if op == "*" and (ka is not None or kb is not None):
        return _scaled(ka, linear(b, rows)) if ka is not None else _scaled(kb, linear(a, rows))
    if op == "/" and kb:
        return _scaled(1.0 / kb, linear(a, rows))
    return None


def _scaled(k: float, lin: Linear | None) -> Linear | None:
    return None if lin is None else ({key: k * c for key, c in lin[0].items()}, k * lin[1])


def value(node: Any, rows: list[dict[str, Any]]) -> float:
    """The figure of a parse-tree node over the rows (a term: the mean over its matching rows)."""
    if isinstance(node, float):
        return node
    if isinstance(node, Term):
        vals = [r[node.metric] for r in rows if matches(r, node.selectors)
                and r.get(node.metric) is not None]
        if not vals:
            raise LookupError(f"no result matches {node}")
        return sum(vals) / len(vals)
    if node[0] == "neg":
        return -value(node[1], rows)
    a, b = value(node[1], rows), value(node[2], rows)
    if node[0] == "/":
        if b == 0:
            raise LookupError(f"division by zero in {node[2]}")
        return a / b
    return {"+": a + b, "-": a - b, "*": a * b}[node[0]]


# --- the decision --------------------------------------------------------------------------

@dataclass(frozen=True)
class Zone:
    """How a one-sided check is decided: `sign` turns `left - right` into u (u >= 0 meets the
    claim); `effect` is the width of the zone beside the bound u = 0 where either verdict is
    acceptable; `limit`: the zone lies on the failing side (a bound no difference meets: it must
    catch a miss of `effect`), else on the passing side (a claim of an effect: it must show one of
    `effect`). effect None: the line states none and its bound gives none."""

    sign: float
    effect: float | None
    limit: bool
    strict: bool = False  # < or >: u = 0 does not meet the claim


def zone(check: Check) -> Zone:
    """The check's zone: default effect from its bound (the bound's distance from no difference).

    check: a one-sided check (<, <=, >, >=)."""
    sign = 1.0 if check.op in (">", ">=") else -1.0
    u_null = sign * null_value(check)
    # no difference meets it (`rate <= 0.01`, `A <= B`): a limit; it fails it (`A > B`,
    # `off >= 1.2 * on`): a claim of an effect
    limit = u_null > 0 or (u_null == 0 and check.op in ("<=", ">="))
    effect = check.effect if check.effect is not None else (abs(u_null) or None)
    return Zone(sign, effect, limit, check.op in ("<", ">"))


def decide_one_sided(est: Estimate, z: Zone) -> tuple[str, str]:
    """(verdict, why) from the (1 - 2 ALPHA) interval of u: wholly >= 0 PASS, wholly < 0 FAIL;
    across 0, a limit PASSes when a miss of its effect is ruled out (lower end > -effect), a claim
    of an effect FAILs when an effect of its size is ruled out (upper end < effect); else UNDECIDED.

    est: the estimate; z: its zone (effect not None)."""
    u = z.sign * est.value
    lo, hi = u - Z * est.se, u + Z * est.se
    shown = f"interval [{lo:+.4g}, {hi:+.4g}] of the margin to the bound"
    if lo > 0 or (lo == 0 and not z.strict):
        return "PASS", f"{shown}: meets it"
    if hi < 0 or (hi == 0 and z.strict):
        return "FAIL", f"{shown}: missed beyond chance"
    assert z.effect is not None
    if z.limit and lo > -z.effect:
        return "PASS", f"{shown}: a miss of {z.effect:g} ruled out"
    if not z.limit and hi < z.effect:
        return "FAIL", f"{shown}: an effect of {z.effect:g} ruled out"
    return "UNDECIDED", f"{shown}: wider than the effect {z.effect:g}"


def decide_equivalence(est: Estimate, margin: float) -> tuple[str, str]:
    """TOST: PASS when the (1 - 2 ALPHA) interval of the difference lies inside +-margin, FAIL
    when it lies wholly outside, else UNDECIDED.

    est: the difference's estimate; margin: the line's `within`."""
    lo, hi = est.value - Z * est.se, est.value + Z * est.se
    shown = f"difference {est.value:+.4g}, interval [{lo:+.4g}, {hi:+.4g}]"
    if -margin <= lo and hi <= margin:
        return "PASS", f"{shown} inside +-{margin:g}"
    if lo > margin or hi < -margin:
        return "FAIL", f"{shown} outside +-{margin:g}"
    return "UNDECIDED", f"{shown} across +-{margin:g}"


def needed_se(check: Check) -> float | None:
    """The largest standard error (check units) at which the check is always decided with power
    0.95: one-sided, an interval no wider than the effect (2 Z se <= effect); `~=`, TOST passing
    with power 0.95 at no difference ((Z + Z_EQUIV) se <= margin). None: no effect known."""
    if check.op == "~=":
        assert check.within is not None
        return check.within / (Z + Z_EQUIV)
    eff = zone(check).effect
    return None if eff is None else eff / (2 * Z)
