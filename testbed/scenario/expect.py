"""The `expect:` language: checks over a run's results, evaluated after the run.

    slo_violation_rate[service=imgcls, slicing=on, iperf_flows=40] <= 0.01
    mean_latency_ms[service=imgcls, slicing=off, iperf_flows=40]
        / mean_latency_ms[service=imgcls, slicing=off, iperf_flows=10] >= 1.2

A term `metric[key=value, ...]` is the mean of that metric over the result rows that match
every selector (service, slice, rep, or any matrix key); numbers, + - * / and parentheses
combine terms; one comparison (<, <=, >, >=, ==, !=) ends the check.

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
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from dataclasses import dataclass
from typing import Any

from testbed.scenario.matrix import fmt_value
from testbed.scenario.spec import Scenario

# metric -> what it means; rows come from testbed.scenario.results
METRICS = {
    "slo_violation_rate": "violations / requests (failed, timed out or over the SLO threshold)",
    "mean_latency_ms": "mean latency of successful requests, from send time",
    "p50_latency_ms": "median latency of successful requests",
    "p99_latency_ms": "99th percentile latency of successful requests",
    "mean_sched_latency_ms": "mean latency from the scheduled time (shows coordinated omission)",
    "throughput_rps": "successful requests per second",
    "requests": "requests sent",
    "errors": "requests that failed (no response, 5xx, timeout, ...)",
    "mean_replicas": "mean ready replicas over the cell",
    "reward": "mean reward of Eq. 3.2 over scaler periods",
    "iperf_goodput_mbit": "iperf3 cross-traffic goodput of a slice",
    "replica_probes": "replica reports taken (one per ready replica and scaler period, local testbed)",
    "config_mismatches": "reports whose share, batch or interference stretch differ from what the "
                         "cluster set (or no answer)",
    "target_mismatches": "reports whose share or batch differ from the policy's last applied target",
    "mean_share_pct": "mean MPS share (% of a GPU) a replica reported",
    "mean_batch": "mean batch size a replica reported",
    "mean_stretch": "mean interference stretch (1 + InSS's term) a replica reported",
    "max_stretch": "largest interference stretch a replica reported",
    "chain_violation_rate": "routed pipeline (simulator): requests late against its SLA end to end "
                            "or dropped at any stage, over requests resolved",
    "mean_e2e_ms": "routed pipeline: mean end-to-end latency (first arrival to last finish)",
    "p99_e2e_ms": "routed pipeline: 99th percentile end-to-end latency",
    "on_time_rps": "routed pipeline: requests per second completed within its SLA",
}
FIXED_KEYS = {"service", "slice", "rep"}
# metrics of the rows that are not per service (testbed.scenario.results): slice rows and the
# simulator's pipeline rows
SLICE_METRICS = {"iperf_goodput_mbit"}
CHAIN_METRICS = {"chain_violation_rate", "mean_e2e_ms", "p99_e2e_ms", "on_time_rps", "requests"}
PASS, FAIL, UNDECIDED = "PASS", "FAIL", "UNDECIDED"
ALPHA = 0.05  # the count test's significance level (one-sided)
_CMP = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
        "==": operator.eq, "!=": operator.ne}
_TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|(?P<name>[A-Za-z_]\w*)"
                    r"|(?P<sel>\[[^\]]*\])|(?P<op><=|>=|==|!=|[<>+\-*/()]))")


MAX_CHECK_CHARS = 2000  # one check is a line or two
MAX_NESTING = 32  # parentheses and unary minus


class ExpectSyntaxError(ValueError):
    pass


@dataclass(frozen=True)
class Term:
    metric: str
    selectors: tuple[tuple[str, str], ...]

    def __str__(self) -> str:
        sel = ", ".join(f"{k}={v}" for k, v in self.selectors)
        return f"{self.metric}[{sel}]" if sel else self.metric


@dataclass(frozen=True)
class Check:
    text: str
    left: Any
    op: str
    right: Any

    def terms(self) -> list[Term]:
        out: list[Term] = []

        def walk(node: Any) -> None:
            if isinstance(node, Term):
                out.append(node)
            elif isinstance(node, tuple):
                for n in node[1:]:
                    walk(n)
        walk(self.left)
        walk(self.right)
        return out


def parse(text: str) -> Check:
    if len(text) > MAX_CHECK_CHARS:
        raise ExpectSyntaxError(f"a check is at most {MAX_CHECK_CHARS} characters, this one has "
                                f"{len(text)}")
    tokens = _tokenize(text)
    pos = 0
    depth = 0

    def peek() -> tuple[str, str] | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> tuple[str, str]:
        nonlocal pos
        if pos >= len(tokens):
            raise ExpectSyntaxError(f"unexpected end of check: {text!r}")
        pos += 1
        return tokens[pos - 1]

    def nested(parse_inner: Any) -> Any:
        nonlocal depth
        depth += 1
        if depth > MAX_NESTING:
            raise ExpectSyntaxError(f"nested deeper than {MAX_NESTING} levels in {text[:60]!r}...")
        try:
            return parse_inner()
        finally:
            depth -= 1

    def atom() -> Any:
        kind, val = take()
        if kind == "num":
            return float(val)
        if kind == "op" and val == "(":
            node = nested(expr)
            if take() != ("op", ")"):
                raise ExpectSyntaxError(f"missing ')' in {text!r}")
            return node
        if kind == "op" and val == "-":
            return ("neg", nested(atom))
        if kind == "name":
            sels: tuple[tuple[str, str], ...] = ()
            if peek() and peek()[0] == "sel":
                sels = _selectors(take()[1], text)
            return Term(val, sels)
        raise ExpectSyntaxError(f"unexpected {val!r} in {text!r}")

    def product() -> Any:
        node = atom()
        while peek() in (("op", "*"), ("op", "/")):
            node = (take()[1], node, atom())
        return node

    def expr() -> Any:
        node = product()
        while peek() in (("op", "+"), ("op", "-")):
            node = (take()[1], node, product())
        return node

    left = expr()
    nxt = peek()
    if not nxt or nxt[1] not in _CMP:
        raise ExpectSyntaxError(f"a check needs one comparison (<, <=, >, >=, ==, !=): {text!r}")
    op = take()[1]
    right = expr()
    if peek() is not None:
        raise ExpectSyntaxError(f"unexpected {peek()[1]!r} after the comparison in {text!r}")
    return Check(text, left, op, right)


def _tokenize(text: str) -> list[tuple[str, str]]:
    out = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExpectSyntaxError(f"cannot read {text[pos:]!r} in {text!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _selectors(raw: str, text: str) -> tuple[tuple[str, str], ...]:
    body = raw[1:-1].strip()
    if not body:
        return ()
    out = []
    for part in body.split(","):
        if "=" not in part:
            raise ExpectSyntaxError(f"selector {part.strip()!r} needs key=value in {text!r}")
        k, v = (x.strip() for x in part.split("=", 1))
        out.append((k, v))
    return tuple(out)


def check_expectations(scn: Scenario, slices: list[str] | None = None) -> list[tuple[tuple, str]]:
    """Syntax, metrics, selector keys and values (a service, slice, repetition or matrix value
    that no row can have), and division by a constant zero."""
    problems = []
    keys = FIXED_KEYS | set(scn.matrix)
    values: dict[str, set[str]] = {k: {_norm(v) for v in vs} for k, vs in scn.matrix.items()}
    values.setdefault("service", {_norm(s.name) for s in scn.services})
    values["rep"] = {_norm(r) for r in range(scn.repetitions)}
    if slices is not None:
        values["slice"] = {_norm(s) for s in slices}
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
                elif k in values and _norm(v) not in values[k]:
                    problems.append((("expect", i), f"{k}={v} in {term} matches no result "
                                     f"({k}: {', '.join(sorted(values[k]))})"))
        for side in (check.left, check.right):
            zero = _constant_zero_divisor(side)
            if zero is not None:
                problems.append((("expect", i), f"division by zero: the divisor {zero} is always 0"))
    return problems


def _constant(node: Any) -> float | None:
    """The value of a subexpression without terms, else None."""
    if isinstance(node, float):
        return node
    if isinstance(node, Term):
        return None
    if node[0] == "neg":
        v = _constant(node[1])
        return None if v is None else -v
    a, b = _constant(node[1]), _constant(node[2])
    if a is None or b is None or (node[0] == "/" and b == 0):
        return None
    return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else 0.0}[node[0]]


def _constant_zero_divisor(node: Any) -> str | None:
    if isinstance(node, float | Term):
        return None
    if node[0] == "neg":
        return _constant_zero_divisor(node[1])
    if node[0] == "/" and _constant(node[2]) == 0:
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
    will have, without values: what a selector can match."""
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
    valid values that never occurs together, a slice metric asked of a service, ...)."""
    skeleton = skeleton_rows(cells, scn.repetitions, scn.engine)
    problems = []
    for i, text in enumerate(scn.expect):
        for term in parse(text).terms():
            if not any(_row_has(r, term.metric) and _matches(r, term.selectors) for r in skeleton):
                problems.append((("expect", i), f"{term} matches no cell of the matrix (cells: "
                                 + "; ".join(c.label for c in cells) + ")"))
    return problems


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


def _matches(row: dict[str, Any], selectors: tuple[tuple[str, str], ...]) -> bool:
    return all(k in row and _norm(row[k]) == _norm(v) for k, v in selectors)


def _norm(v: Any) -> str:
    s = fmt_value(v) if isinstance(v, bool) else str(v)
    s = s.strip().lower()
    s = {"true": "on", "false": "off", "yes": "on", "no": "off"}.get(s, s)
    try:
        f = float(s)
        return repr(f)
    except ValueError:
        return s
