"""Figs 5.7/5.8: the bottleneck setups the slicing study compares, and the judge of Section 5.3.

A `Setup` fixes what Section 5.3 leaves open (iperf3 direction, buffer, per-direction cap);
`slicing_scenario` writes the slicing scenario for it; `judge_slicing` says, per service, whether
measured cells show the pattern the text states. The bench script and `testbed reproduce` share
these, so the study's verdict and the report's PASS/FAIL are the same rule.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import yaml

# How close is "no difference" and how big is "a small difference" (Section 5.3 gives no
# numbers; these are this harness's reading, stated in docs/slicing.md and in every report).
SAME_MEAN = 0.10  # |off/on - 1| <= 10 %: no difference in mean time
SAME_SLO = 0.01  # |off - on| <= 1 percentage point: no difference in SLO violation rate
SMALL_MEAN = 0.30  # TTS at 40 flows: off/on <= 1.3 is "a small difference"
FLAT_MEAN = 0.10  # imgcls with a slice: mean at the most flows / at the fewest < 1.1
FLAT_SLO = 0.01  # imgcls with a slice: SLO violations <= 1 % at every flow count
GROWS_MEAN = 1.20  # imgcls without a slice: mean at the most flows >= 1.2 x with the slice


@dataclass(frozen=True)
class Setup:
    directions: tuple[str, ...]  # iperf3 directions, each with `flows` flows
    queue_packets: int = 100
    uplink_mbit: float | None = None  # None: the 100 Mbit/s cap
    downlink_mbit: float | None = None
    flow_queues: int = 0  # 0: one FIFO per class; N: per-flow round robin over N hashed queues
    note: str = ""

    def describe(self) -> str:
        up = self.uplink_mbit or 100
        down = self.downlink_mbit or 100
        fq = f"{self.flow_queues} flow queues of " if self.flow_queues else "one FIFO of "
        return (f"iperf3 {'+'.join(self.directions)}, {fq}{self.queue_packets} packets, "
                f"uplink {up:g} / downlink {down:g} Mbit/s. {self.note}").strip()

    def link(self) -> dict[str, Any]:
        link: dict[str, Any] = {"capacity_mbit": 100, "queue_packets": self.queue_packets}
        if self.uplink_mbit is not None:
            link["uplink_mbit"] = self.uplink_mbit
        if self.downlink_mbit is not None:
            link["downlink_mbit"] = self.downlink_mbit
        if self.flow_queues:
            link["flow_queues"] = self.flow_queues
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
        "services": [{"name": s, "replicas": 6} for s in ("chatbot", "imgcls", "tts")],
        "clients": [{"service": "chatbot", "ue_group": "ai", "rate": 10},
                    {"service": "imgcls", "ue_group": "ai", "rate": 30},
                    {"service": "tts", "ue_group": "ai", "rate": 10}],
        "cross_traffic": [{"slice": "be", "flows": 10, "direction": d} for d in setup.directions],
        "matrix": {"service": services, "iperf_flows": flows, "slicing": slicing},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def judge_slicing(cells: dict[tuple[str, int, bool], dict[str, Any]], flows: list[int]
                  ) -> dict[str, tuple[bool, str]]:
    """Per service: (pattern holds, why not). `cells` maps (service, flows, slicing) to a dict
    with `mean_ms` and `slo`. Services without all their cells are left out."""
    out: dict[str, tuple[bool, str]] = {}
    flows = sorted(flows)
    lo, hi = flows[0], flows[-1]
    for service in ("imgcls", "tts", "chatbot"):
        have = {(f, s): cells.get((service, f, s)) for f in flows for s in (True, False)}
        if any(v is None or v.get("mean_ms") is None for v in have.values()):
            continue
        on = {f: have[(f, True)] for f in flows}
        off = {f: have[(f, False)] for f in flows}
        why: list[str] = []
        if service == "imgcls":
            if on[hi]["mean_ms"] / on[lo]["mean_ms"] >= 1 + FLAT_MEAN:
                why.append(f"slice on: mean grows {on[lo]['mean_ms']:.0f}->{on[hi]['mean_ms']:.0f} ms")
            if any(on[f]["slo"] > FLAT_SLO for f in flows):
                why.append("slice on: SLO violations > 1 %")
            means = [off[f]["mean_ms"] for f in flows]
            slos = [off[f]["slo"] for f in flows]
            # rises with the flows: no step down beyond noise (5 %, 0.5 point), up overall
            # (one flow count, as in slicing-ci, cannot show growth: only the gap is judged)
            grows = len(flows) > 1
            if grows and (any(b < 0.95 * a for a, b in itertools.pairwise(means))
                          or means[-1] <= means[0]):
                why.append("slice off: mean does not grow with flows")
            if grows and (any(b < a - 0.005 for a, b in itertools.pairwise(slos))
                          or slos[-1] <= slos[0]):
                why.append("slice off: SLO violations do not grow with flows")
            if off[hi]["slo"] <= on[hi]["slo"]:
                why.append(f"at {hi} flows no more SLO violations without the slice")
            if off[hi]["mean_ms"] < GROWS_MEAN * on[hi]["mean_ms"]:
                why.append(f"at {hi} flows off/on only {off[hi]['mean_ms'] / on[hi]['mean_ms']:.2f}x")
        else:
            for f in flows:
                ratio = off[f]["mean_ms"] / on[f]["mean_ms"]
                limit = SMALL_MEAN if (service == "tts" and f == hi) else SAME_MEAN
                if abs(ratio - 1) > limit:
                    why.append(f"{f} flows: off/on mean {ratio:.2f}x")
                if abs(off[f]["slo"] - on[f]["slo"]) > SAME_SLO:
                    why.append(f"{f} flows: SLO {100 * on[f]['slo']:.1f} vs "
                               f"{100 * off[f]['slo']:.1f} %")
        out[service] = (not why, "; ".join(why))
    return out


def rule_text() -> list[str]:
    """The tolerances, in words, for reports and docs."""
    return [
        f"imgcls: with the slice, mean at the most flows < {1 + FLAT_MEAN:g} x at the fewest and "
        f"SLO violations <= {100 * FLAT_SLO:g} % at every count; without it, mean and SLO "
        f"violations rise with the flows (no step down beyond 5 % / 0.5 point; not judged with one "
        f"flow count) and at the most flows the mean is >= {GROWS_MEAN:g} x the sliced one and "
        f"the SLO violation rate above it",
        f"tts: off/on mean within {100 * SAME_MEAN:g} % below the most flows and within "
        f"+{100 * SMALL_MEAN:g} % at the most; SLO violation rates within "
        f"{100 * SAME_SLO:g} percentage point",
        f"chatbot: off/on mean within {100 * SAME_MEAN:g} % and SLO violation rates within "
        f"{100 * SAME_SLO:g} percentage point at every count",
    ]
