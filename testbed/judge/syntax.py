"""The `expect:` language: a check's grammar and its parse tree (`Term`, `Check`); the checks of
a scenario's lines against the scenario are testbed.scenario.expect_checks.

    slo_violation_rate[service=imgcls, slicing=on, iperf_flows=40] <= 0.01
    mean_latency_ms[service=imgcls, slicing=off, iperf_flows=40]
        / mean_latency_ms[service=imgcls, slicing=off, iperf_flows=10] >= 1.2

A term `metric[key=value, ...]` is the mean of that metric over the result rows that match
every selector (service, slice, rep, or any matrix key); numbers, + - * / and parentheses
combine terms; one comparison (<, <=, >, >=, ==, !=, ~=) ends the check. The verdicts are
testbed.judge.outcome's. After the comparison, optional clauses:

    A ~= B within M     "no difference within M": an equivalence test (TOST), M in the check's units
    ... effect E        the effect the check must detect, in the check's units (a ratio for a
                        ratio of means, a difference for rates); default: from its bound
    ... exploratory     the scenario does not size this check (pytest: xfail when UNDECIDED)
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any

# metric -> what it means; rows come from testbed.scenario.results
METRICS = {
    "slo_violation_rate": "violations / requests (failed, timed out or over the SLO threshold)",
    "mean_latency_ms": "mean latency of successful requests, from send time",
    "p50_latency_ms": "median latency of successful requests",
    "p95_latency_ms": "95th percentile latency of successful requests",
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
COMPARISONS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
        "==": operator.eq, "!=": operator.ne, "~=": lambda a, b: abs(a - b) <= 0.0}
_TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|(?P<name>[A-Za-z_]\w*)"
                    r"|(?P<sel>\[[^\]]*\])|(?P<op><=|>=|==|!=|~=|[<>+\-*/()]))")
_NUM = r"\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
# the clauses after the comparison (order free, each at most once)
_CLAUSES = re.compile(rf"\s+(?:within\s+(?P<within>{_NUM})|effect\s+(?P<effect>{_NUM})"
                      r"|(?P<exploratory>exploratory))\s*$")


MAX_CHECK_CHARS = 2000  # one check is a line or two
MAX_NESTING = 32  # parentheses and unary minus


class ExpectSyntaxError(ValueError):
    """An `expect:` line that does not parse, with what was expected where."""
    pass


@dataclass(frozen=True)
class Term:
    """One side's term: a results metric and the selectors that pick its row
    (`slo_violation_rate[service=imgcls, slicing=on]`)."""
    metric: str
    selectors: tuple[tuple[str, str], ...]

    def __str__(self) -> str:
        sel = ", ".join(f"{k}={v}" for k, v in self.selectors)
        return f"{self.metric}[{sel}]" if sel else self.metric


@dataclass(frozen=True)
class Check:
    """One `expect:` line: `left op right`, with `within` (the margin of `~=`), `effect` (the
    effect it must detect, None: from its bound) and `exploratory` (not sized by the scenario)."""

    text: str
    left: Any
    op: str
    right: Any
    within: float | None = None
    effect: float | None = None
    exploratory: bool = False

    def terms(self) -> list[Term]:
        """Every term of both sides."""
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
    """The Check that `expect:` line `text` states; ExpectSyntaxError if it is not one."""
    if len(text) > MAX_CHECK_CHARS:
        raise ExpectSyntaxError(f"a check is at most {MAX_CHECK_CHARS} characters, this one has "
                                f"{len(text)}")
    body, clauses = _split_clauses(text)
    parser = _Parser(text, _tokenize(body))
    left = parser.expr()
    nxt = parser.peek()
    if not nxt or nxt[1] not in COMPARISONS:
        raise ExpectSyntaxError(f"a check needs one comparison (<, <=, >, >=, ==, !=, ~=): {text!r}")
    op = parser.take()[1]
    right = parser.expr()
    if parser.peek() is not None:
        raise ExpectSyntaxError(f"unexpected {parser.peek()[1]!r} after the comparison in {text!r}")
    return _with_clauses(Check(text, left, op, right), clauses)


class _Parser:
    """Recursive descent over a check's tokens: expr = product (+|- product)*, product = atom
    (*|/ atom)*, atom = number | name[selectors] | ( expr ) | - atom; nested at most MAX_NESTING."""

    def __init__(self, text: str, tokens: list[tuple[str, str]]) -> None:
        self.text = text  # the whole check, for the errors
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise ExpectSyntaxError(f"unexpected end of check: {self.text!r}")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def nested(self, parse_inner: Any) -> Any:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ExpectSyntaxError(f"nested deeper than {MAX_NESTING} levels in {self.text[:60]!r}...")
        try:
            return parse_inner()
        finally:
            self.depth -= 1

    def atom(self) -> Any:
        text = self.text
        kind, val = self.take()
        if kind == "num":
            return float(val)
        if kind == "op" and val == "(":
            node = self.nested(self.expr)
            if self.take() != ("op", ")"):
                raise ExpectSyntaxError(f"missing ')' in {text!r}")
            return node
        if kind == "op" and val == "-":
            return ("neg", self.nested(self.atom))
        if kind == "name":
            sels: tuple[tuple[str, str], ...] = ()
            if self.peek() and self.peek()[0] == "sel":
                sels = _selectors(self.take()[1], text)
            return Term(val, sels)
        raise ExpectSyntaxError(f"unexpected {val!r} in {text!r}")

    def product(self) -> Any:
        node = self.atom()
        while self.peek() in (("op", "*"), ("op", "/")):
            node = (self.take()[1], node, self.atom())
        return node

    def expr(self) -> Any:
        node = self.product()
        while self.peek() in (("op", "+"), ("op", "-")):
            node = (self.take()[1], node, self.product())
        return node


def _split_clauses(text: str) -> tuple[str, dict[str, str]]:
    """The comparison and its trailing clauses (`within M`, `effect E`, `exploratory`)."""
    body, clauses = text.rstrip(), {}
    while m := _CLAUSES.search(body):
        key = next(k for k, v in m.groupdict().items() if v is not None)
        if key in clauses:
            raise ExpectSyntaxError(f"'{key}' twice in {text!r}")
        clauses[key] = m.group(key)
        body = body[:m.start()]
    return body, clauses


def _with_clauses(check: Check, clauses: dict[str, str]) -> Check:
    """`check` with its clauses, or the line's one problem: `~=` needs `within M` (M > 0) and
    takes no `effect` (its margin is its effect); `within` belongs to `~=` alone."""
    within = float(clauses["within"]) if "within" in clauses else None
    effect = float(clauses["effect"]) if "effect" in clauses else None
    if check.op == "~=" and not within:
        raise ExpectSyntaxError(f"'~=' needs 'within M' (M > 0), the margin of no difference: "
                                f"{check.text!r}")
    if check.op != "~=" and within is not None:
        raise ExpectSyntaxError(f"'within' goes with '~=' (no difference within M): {check.text!r}")
    if effect is not None and (check.op == "~=" or effect <= 0):
        raise ExpectSyntaxError(f"'effect' must be > 0 and not on '~=' (whose margin is its "
                                f"effect): {check.text!r}")
    return Check(check.text, check.left, check.op, check.right, within, effect,
                 "exploratory" in clauses)


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


def constant(node: Any) -> float | None:
    """The value of a subexpression without terms, else None.

    node: a parse-tree node (a number, a Term, or an operator tuple)."""
    if isinstance(node, float):
        return node
    if isinstance(node, Term):
        return None
    if node[0] == "neg":
        v = constant(node[1])
        return None if v is None else -v
    a, b = constant(node[1]), constant(node[2])
    if a is None or b is None or (node[0] == "/" and b == 0):
        return None
    return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else 0.0}[node[0]]


def matches(row: dict[str, Any], selectors: tuple[tuple[str, str], ...]) -> bool:
    """Whether a result row has every selector's key at its value (on/off, yes/no, true/false
    alike; numbers as numbers).

    row: a result row (or a cell's parameters); selectors: a Term's."""
    return all(k in row and norm(row[k]) == norm(v) for k, v in selectors)


def norm(v: Any) -> str:
    """A selector's or a row's value as selectors compare them: on/off for booleans, a float's
    repr for a number, else the lowercased text.

    v: the value."""
    s = str(v).strip().lower()
    s = {"true": "on", "false": "off", "yes": "on", "no": "off"}.get(s, s)
    try:
        f = float(s)
        return repr(f)
    except ValueError:
        return s
