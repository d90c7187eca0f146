"""Figs 5.7/5.8: the bottleneck setups the slicing study compares, and the judge of Section 5.3.

A `Setup` fixes what Section 5.3 leaves open (iperf3 direction, buffer, per-direction cap);
`slicing_scenario` writes the slicing scenario for it; `expectations` writes the pattern the text
states as `expect:` checks, and `judge_slicing` evaluates them over a run's rows. The scenario
files' `expect:` lines, `testbed reproduce`, the bench script and the reports all use these, so
every verdict on Figs 5.7/5.8 is the same rule's.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from testbed.judge.outcome import PASS, Outcome, evaluate_all
from testbed.judge.stats import ALPHA
from testbed.judge.verdict import run_verdict
from testbed.profiles.paper import (
    FIG_5_7_5_8_SOURCE,
    FIG_5_7_5_8_VALUES,
    FIG_FLOWS,
    FIG_MEAN_EXPLORATORY,
    SLICING_CLAIMS,
    SLICING_PLAN,
    SLICING_RATES,
)

# How close is "no difference" and how big is "a small difference" (Section 5.3 gives no
# numbers; these are this harness's reading, stated in docs/slicing.md and in every report).
SAME_MEAN = 0.10  # |off/on - 1| <= 10 %: no difference in mean time
SAME_SLO = 0.02  # |off - on| <= 2 percentage points: no difference in SLO violation rate (1 point
#                  needs >= 510 requests per cell to decide, 51 s at TTS's 10 req/s: docs/tolerances.md)
SMALL_MEAN = 0.30  # TTS at 40 flows: off/on <= 1.3 is "a small difference"
FLAT_MEAN = 0.10  # imgcls with a slice: mean at the most flows / at the fewest < 1.1
FLAT_SLO = 0.01  # imgcls with a slice: SLO violations <= 1 % at every flow count, a limit that
FLAT_SLO_EFFECT = 0.015  # must catch 2.5 % (1 % more needs ~1200 requests per cell to decide)
GROWS_MEAN = 1.20  # imgcls without a slice: mean at the most flows >= 1.2 x with the slice ...
GROWS_EFFECT = 1.0  # ... which must detect a slowdown of 1.2 + 1.0 = 2.2 x (Fig 5.7: 2.89 x)
GROWS_SLO = 0.02  # ... and an SLO violation rate 2 points above the sliced one (Fig 5.7: 8.5 points)
RISES_MEAN = 1.0  # without the slice the mean at the most flows must show a rise of 50 % over the
#                   fewest (Fig 5.7: 2.25 x from 10 to 40 flows)
STEP_MEAN = 0.05  # imgcls without a slice: the mean may dip this much from one count to the next
STEP_SLO = 0.005  # ... and the SLO violation rate this much (noise)
# How close to the values behind Figs 5.7/5.8 (profiles.paper.FIG_5_7_5_8_VALUES). Our services'
# own times differ from the paper's (imgcls ~95 ms where the paper's slice gives ~110), so a mean
# is compared as the ratio without/with the slice, which cancels them; an SLO violation rate as is.
FIG_RATIO_REL = 0.25  # our off/on mean within 25 % of the figure's excess over 1 (ratio - 1) ...
FIG_RATIO_ABS = 0.10  # ... and never tighter than 0.1
FIG_SLO_FACTOR = 2.0  # our SLO violation rate without the slice within a factor 2 of the figure's,
FIG_SLO_MIN = 0.01  # where the figure's is 1 % or more: below, a cell of a few hundred requests
#                     cannot tell a factor 2 (and the sliced arm, ~0.1 %, has FLAT_SLO)
# A band's lower edge under this is exploratory: at 20 flows the figure's 2.42 % puts it at
# 1.21 %, and this model's tail there is 0.9-1.9 % from run to run (docs/slicing.md, 10 runs), so
# a 40 s cell (1,200 requests, +-0.6 points) cannot tell the two apart; its upper edge decides
FIG_SLO_DECIDES = 0.02




@dataclass(frozen=True)
class Setup:
    directions: tuple[str, ...]  # iperf3 directions, each with `flows` flows
    queue_packets: int = 100  # the FIFO per class, or each flow queue with flow_queues
    uplink_mbit: float | None = None  # None: the 100 Mbit/s cap
    downlink_mbit: float | None = None
    flow_queues: int = 0  # 0: one FIFO per class; N: per-flow round robin over N hashed queues
    flow_queue_drop: str = "tail"  # which end of a full flow queue drops (link.flow_queue_drop)
    flow_queue_bytes: int | None = None  # each flow queue a byte FIFO of this many (in place of packets)
    flow_queue_sets: str = "per-class"  # whose flows may share a flow queue (link.flow_queue_sets)
    connections: str = "keep-alive"  # the clients' connections (a scenario client's `connections`)
    uplink_loss: float = 0.0  # random loss of uplink packets (link.uplink_loss)
    perturb_s: float | None = None  # the flow queues' hash re-drawn this often (link.flow_queue_perturb_s)
    note: str = ""

    def describe(self) -> str:
        up = self.uplink_mbit or 100
        down = self.downlink_mbit or 100
        fq = (f"{self.flow_queues} {self.flow_queue_drop}-drop flow queues of "
              if self.flow_queues else "one FIFO of ")
        depth = (f"{self.flow_queue_bytes} bytes" if self.flow_queue_bytes
                 else f"{self.queue_packets} packets")
        sets = f" ({self.flow_queue_sets})" if self.flow_queues else ""
        if self.perturb_s is not None:
            sets += f", the hash re-drawn every {self.perturb_s:g} s"
        return (f"iperf3 {'+'.join(self.directions)}, {fq}{depth}{sets}, "
                f"uplink {up:g} / downlink {down:g} Mbit/s, {self.connections} connections. "
                f"{self.note}").strip()

    def link(self) -> dict[str, Any]:
        depth = "flow_queue_packets" if self.flow_queues else "queue_packets"
        link: dict[str, Any] = {"capacity_mbit": 100, depth: self.queue_packets}
        if self.flow_queue_bytes is not None:
            del link["flow_queue_packets"]
            link["flow_queue_bytes"] = self.flow_queue_bytes
        if self.uplink_mbit is not None:
            link["uplink_mbit"] = self.uplink_mbit
        if self.downlink_mbit is not None:
            link["downlink_mbit"] = self.downlink_mbit
        if self.flow_queues:
            link["flow_queues"] = self.flow_queues
        if self.flow_queue_drop != "tail":
            link["flow_queue_drop"] = self.flow_queue_drop
        if self.flow_queues and self.flow_queue_sets != "per-class":
            link["flow_queue_sets"] = self.flow_queue_sets
        if self.uplink_loss:
            link["uplink_loss"] = self.uplink_loss
        if self.perturb_s is not None:
            link["flow_queue_perturb_s"] = self.perturb_s
        return link


SETUPS: dict[str, Setup] = {
    "both-q100": Setup(("uplink", "downlink"), 100, note="main before issue 12"),
    "up-q100": Setup(("uplink",), 100, note="iperf3's default direction"),
    "up-q1000": Setup(("uplink",), 1000, note="Linux's default queue (txqueuelen 1000)"),
    "up-q30": Setup(("uplink",), 30, note="a shallow buffer: 3.6 ms at 100 Mbit/s"),
    "up-q50": Setup(("uplink",), 50, note="6 ms at 100 Mbit/s"),
    "both-q1000": Setup(("uplink", "downlink"), 1000),
    "both-q100-dl400": Setup(("uplink", "downlink"), 100, downlink_mbit=400,
                             note="RAN-like: the downlink has 4x the uplink's capacity"),
    "both-q1000-dl400": Setup(("uplink", "downlink"), 1000, downlink_mbit=400),
    "up-q1000-dl400": Setup(("uplink",), 1000, downlink_mbit=400),
    "up-fq": Setup(("uplink",), 100, flow_queues=256,
                   note="per-flow fair queueing (as fq_codel, or a radio's scheduler)"),
    "both-fq": Setup(("uplink", "downlink"), 100, flow_queues=256),
    "up-fq-q50": Setup(("uplink",), 50, flow_queues=256, note="shallower flow queues"),
    "up-fq-q30": Setup(("uplink",), 30, flow_queues=256, note="shallower flow queues"),
    "up-fq-q20": Setup(("uplink",), 20, flow_queues=256, note="shallower flow queues"),
    "up-fq-q15": Setup(("uplink",), 15, flow_queues=256, note="shallower flow queues"),
    "up-fq-q8": Setup(("uplink",), 8, flow_queues=256, note="shallower flow queues"),
    "up-fq-q20-head": Setup(("uplink",), 20, flow_queues=256, flow_queue_drop="head",
                            note="shallower flow queues dropping their oldest packet (fq_codel)"),
    "up-fq-q15-head": Setup(("uplink",), 15, flow_queues=256, flow_queue_drop="head",
                            note="shallower flow queues dropping their oldest packet (fq_codel)"),
    "up-fq-q10-head": Setup(("uplink",), 10, flow_queues=256, flow_queue_drop="head",
                            note="shallower flow queues dropping their oldest packet (fq_codel)"),
    "up-fq-b30k": Setup(("uplink",), 100, flow_queues=256, flow_queue_bytes=30_000,
                        note="flow queues of 30,000 bytes (20 full packets): a bound on the wait "
                             "at a flow's share, as CoDel's; ACK streams keep a deep queue"),
    "up-fq-b30k-shared": Setup(("uplink",), 100, flow_queues=256, flow_queue_bytes=30_000,
                               flow_queue_sets="per-class",
                               note="one set of flow queues for both slices: a client's "
                                    "connection can hash into an iperf3 flow's queue"),
    "up-fq-b30k-shared-fresh": Setup(("uplink",), 100, flow_queues=256,
                                     flow_queue_bytes=30_000, flow_queue_sets="per-class",
                                     connections="per-request",
                                     note="as -shared, each request on a new connection (the "
                                          "dissertation's client): each hashes anew"),
    **{f"up-fq-b{kb}k-shared-perturb{p}": Setup(
        ("uplink",), 100, flow_queues=256, flow_queue_bytes=kb * 1000, flow_queue_sets="per-class",
        perturb_s=p, note=f"as -shared, the hash re-drawn every {p} s (sfq's perturb)")
       for kb in (20, 25, 30) for p in (1, 2, 5)},
    "up-fq-b30k-fresh": Setup(("uplink",), 100, flow_queues=256, flow_queue_bytes=30_000,
                              connections="per-request",
                              note="each request on a new connection, per-slice flow queues"),
    **{f"up-fq-b30k-loss{pct:g}": Setup(("uplink",), 100, flow_queues=256,
                                          flow_queue_bytes=30_000, uplink_loss=pct / 100,
                                          note=f"{pct:g} % of uplink packets lost at random")
       for pct in (0.2, 0.5, 1, 2)},
    "up-fq-b20k-fresh": Setup(("uplink",), 100, flow_queues=256, flow_queue_bytes=20_000,
                              connections="per-request",
                              note="each request on a new connection, 20,000-byte flow queues"),
    "up-fq-b20k": Setup(("uplink",), 100, flow_queues=256, flow_queue_bytes=20_000,
                        note="20,000-byte flow queues"),
    "up-fq-b15k": Setup(("uplink",), 100, flow_queues=256, flow_queue_bytes=15_000,
                        note="15,000-byte flow queues"),
    "down-q100": Setup(("downlink",), 100, note="iperf3 -R only"),
}


def slicing_scenario(setup: Setup, *, name: str, duration_s: float, services: list[str],
                     flows: list[int], slicing: list[bool]) -> str:
    """The slicing scenario (Section 5.3's setup) for one bottleneck setup, as YAML text."""
    doc = {
        "name": name,
        "duration_s": duration_s,
        "time_scale": 1,
        "total_units": 6,
        "seed": 7,
        "service_profiles": "profiles/fast-startup.yaml",
        "testbed": {
            "name": "slicing", "link": setup.link(),
            "slices": [
                {"name": "ai", "sst": 1, "sd": "000001", "subnet": "10.45.0.0/24",
                 "guaranteed_mbit": 20},
                {"name": "be", "sst": 1, "sd": "000002", "subnet": "10.46.0.0/24"}],
            "ue_groups": [{"name": "ai", "slice": "ai", "count": 2},
                          {"name": "be", "slice": "be", "count": 2}]},
        "services": [{"name": s, "replicas": 6} for s in SLICING_RATES],
        "plan": SLICING_PLAN,
        "clients": [{"service": s, "ue_group": "ai", "rate": r}
                    | ({"connections": setup.connections}
                       if setup.connections != "keep-alive" else {})
                    for s, r in SLICING_RATES.items()],
        "cross_traffic": [{"slice": "be", "flows": 10, "direction": d} for d in setup.directions],
        "matrix": {"service": services, "iperf_flows": flows, "slicing": slicing},
        # the judge's checks need both arms
        "expect": scenario_expect(flows, services) if set(slicing) == {True, False} else [],
    }
    return yaml.safe_dump(doc, sort_keys=False)


def _term(metric: str, service: str, slicing: bool, flows: int) -> str:
    return f"{metric}[service={service}, slicing={'on' if slicing else 'off'}, iperf_flows={flows}]"


def expectations(flows: list[int], *, figures: bool = True) -> dict[str, list[str]]:
    """Section 5.3's statement for each service as `expect:` checks over a run of the slicing
    scenario with these flow counts, then (`figures`) the checks against the values behind the
    figures: the one rule behind `testbed run` of slicing(-ci).yaml (whose `expect:` lines must be
    exactly these, tests/reproduce/test_slicing.py), `testbed reproduce` and the reports. A check
    one flow count cannot make (growth with the flows) is left out."""
    flows = sorted(flows)
    hi = flows[-1]

    def mean(service: str, on: bool, f: int) -> str:
        return _term("mean_latency_ms", service, on, f)

    def slo(service: str, on: bool, f: int) -> str:
        return _term("slo_violation_rate", service, on, f)

    out: dict[str, list[str]] = {}
    for service, claim in SLICING_CLAIMS.items():
        if claim == "grows":
            out[service] = _grows(service, flows, mean, slo)
            continue
        lines = []
        for f in flows:
            limit = SMALL_MEAN if (claim == "small" and f == hi) else SAME_MEAN
            ratio = f"{mean(service, False, f)} / {mean(service, True, f)}"
            lines += [f"{ratio} ~= 1 within {limit:g}",
                      f"{slo(service, False, f)} ~= {slo(service, True, f)} within {SAME_SLO:g}"]
        out[service] = lines
    if figures:
        for service, lines in figure_expectations(flows).items():
            out[service] += lines
    return out


def _grows(service: str, flows: list[int], mean: Callable[[str, bool, int], str],
           slo: Callable[[str, bool, int], str]) -> list[str]:
    """The checks of a service the slice protects: flat with it, growing with the flows without."""
    lo, hi = flows[0], flows[-1]
    img: list[str] = []
    if len(flows) > 1:
        img.append(f"{mean(service, True, hi)} / {mean(service, True, lo)} < {1 + FLAT_MEAN:g}")
    img += [f"{slo(service, True, f)} <= {FLAT_SLO:g} effect {FLAT_SLO_EFFECT:g}" for f in flows]
    # without the slice both rise with the flows: no step down beyond noise, up overall
    # no step down (exploratory: with the unsliced arm's spread, 40 s cells cannot decide 5 %)
    for a, b in itertools.pairwise(flows):
        img.append(f"{mean(service, False, b)} >= {1 - STEP_MEAN:g} * {mean(service, False, a)} "
                   "exploratory")
    if len(flows) > 1:
        img.append(f"{mean(service, False, hi)} / {mean(service, False, lo)} > 1 "
                   f"effect {RISES_MEAN:g}")
    for a, b in itertools.pairwise(flows):
        img.append(f"{slo(service, False, b)} >= {slo(service, False, a)} - {STEP_SLO:g}")
    if len(flows) > 1:
        img.append(f"{slo(service, False, hi)} > {slo(service, False, lo)} effect {GROWS_SLO:g}")
    img.append(f"{slo(service, False, hi)} > {slo(service, True, hi)} effect {GROWS_SLO:g}")
    img.append(f"{mean(service, False, hi)} >= {GROWS_MEAN:g} * {mean(service, True, hi)} "
               f"effect {GROWS_EFFECT:g}")
    return img


def figure_expectations(flows: list[int]) -> dict[str, list[str]]:
    """Checks against the values behind Figs 5.7/5.8, for a run that has every flow count of the
    figures (a panel is compared whole; one flow count is judged by the statement alone): each
    mean panel as its ratio without/with the slice, the SLO panel without the slice."""
    out: dict[str, list[str]] = {}
    if not set(FIG_FLOWS) <= set(flows):
        return out
    for series in FIG_5_7_5_8_VALUES:
        lines = out.setdefault(series.service, [])
        for f in (f for f in sorted(flows) if f in FIG_FLOWS):
            off, on = series.value(False, f), series.value(True, f)
            if series.metric == "mean_latency_ms":
                ratio = off / on
                band = max(FIG_RATIO_REL * (ratio - 1), FIG_RATIO_ABS)
                ours = (f"{_term(series.metric, series.service, False, f)} / "
                        f"{_term(series.metric, series.service, True, f)}")
                undecided = f in FIG_MEAN_EXPLORATORY.get(series.service, ())  # paper.py says why
                lines.append(f"{ours} ~= {ratio:.3f} within {band:.3f}"
                             + (" exploratory" if undecided else ""))
            elif off >= FIG_SLO_MIN:
                ours = _term(series.metric, series.service, False, f)
                lower = off / FIG_SLO_FACTOR
                lines += [f"{ours} >= {lower:.4f}" + (" exploratory" if lower < FIG_SLO_DECIDES else ""),
                          f"{ours} <= {off * FIG_SLO_FACTOR:.4f}"]
    return out


def scenario_expect(flows: list[int], services: list[str]) -> list[str]:
    """The `expect:` block of a slicing scenario over these services, in the paper's order."""
    checks = expectations(flows)
    return [line for s in SLICING_CLAIMS if s in services for line in checks[s]]


@dataclass
class ServiceVerdict:
    """One service's verdict against Section 5.3, with every check's outcome."""

    verdict: str  # PASS, FAIL or UNDECIDED ("not decided at this size")
    outcomes: list[Outcome]

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    @property
    def why(self) -> str:
        return "; ".join(f"{o.verdict} {o.text}: {o.explain()}" for o in self.outcomes
                         if not o.passed)


def combine(outcomes: list[Outcome], rows: list[dict[str, Any]] | None = None) -> str:
    """The verdict of these checks over these rows by the rule of every run
    (testbed.judge.verdict): FAIL when a check fails the run or one of `rows` is a failed
    cell; else UNDECIDED when one (not `exploratory`) is undecided (never a pass: `testbed
    reproduce` exits 2); else PASS."""
    return run_verdict(outcomes, rows or ()).verdict


def judge_slicing(rows: list[dict[str, Any]], flows: list[int], *,
                  figures: bool = True) -> dict[str, ServiceVerdict]:
    """Per service, the verdict of `expectations(flows, figures=figures)` over a slicing run's
    result rows (testbed.scenario.results). Services without a row in every cell are left out."""
    checks = expectations(flows, figures=figures)
    out: dict[str, ServiceVerdict] = {}
    for service in SLICING_CLAIMS:
        have = {(int(r["iperf_flows"]), _on(r["slicing"])) for r in rows
                if r.get("service") == service and "iperf_flows" in r and "slicing" in r}
        if not all((f, on) in have for f in flows for on in (True, False)):
            continue
        outcomes = evaluate_all(checks[service], rows)
        out[service] = ServiceVerdict(combine(outcomes), outcomes)
    return out


def _on(v: Any) -> bool:
    return v is True or str(v).lower() in ("on", "true", "yes")


def rule_text() -> list[str]:
    """The rule in words, for reports and docs (docs/tolerances.md has it with the paper's text):
    the checks themselves are `expectations(flows)`."""
    return [
        f"imgcls: with the slice, mean at the most flows < {1 + FLAT_MEAN:g} x at the fewest and "
        f"SLO violations <= {100 * FLAT_SLO:g} % at every count (catching "
        f"{100 * (FLAT_SLO + FLAT_SLO_EFFECT):g} %); without it, mean and SLO "
        f"violations rise with the flows (no step down beyond {100 * STEP_MEAN:g} % / "
        f"{100 * STEP_SLO:g} point; up by an effect of {100 * RISES_MEAN:g} % / "
        f"{100 * GROWS_SLO:g} points from the fewest to the most; not judged with one flow "
        f"count) and at the most flows the mean is >= {GROWS_MEAN:g} x the sliced one (an effect "
        f"of {GROWS_MEAN + GROWS_EFFECT:g} x to detect) and the SLO violation rate above it (an "
        f"effect of {100 * GROWS_SLO:g} points to detect)",
        f"tts: off/on mean within {100 * SAME_MEAN:g} % below the most flows and within "
        f"{100 * SMALL_MEAN:g} % at the most; SLO violation rates within "
        f"{100 * SAME_SLO:g} percentage points at every count (no difference: an equivalence test)",
        f"chatbot: off/on mean within {100 * SAME_MEAN:g} % and SLO violation rates within "
        f"{100 * SAME_SLO:g} percentage points at every count (no difference: an equivalence test)",
        f"against the values behind Figs 5.7/5.8 ({FIG_5_7_5_8_SOURCE}), in a run with all "
        f"their flow counts ({', '.join(map(str, FIG_FLOWS))}): each mean panel's ratio "
        f"without/with the slice within max({FIG_RATIO_ABS:g}, {100 * FIG_RATIO_REL:g} % of "
        f"(the figure's ratio - 1)) of the "
        f"figure's ratio (imgcls, tts); imgcls's SLO violation rate without the slice within a "
        f"factor {FIG_SLO_FACTOR:g} of the figure's where that is {100 * FIG_SLO_MIN:g} % or "
        f"more",
        f"every check above on SLO violation rates and mean times is decided on the "
        f"{100 * (1 - 2 * ALPHA):g} % interval of its margin (one-sided errors {ALPHA:g}, power "
        f"0.95 at its effect; variance by two-second batches): a bound PASSes or FAILs when the "
        f"interval is on one side, 'no difference within M' PASSes only inside +-M; else "
        f"UNDECIDED, which fails a run (exit 2)",
    ]
