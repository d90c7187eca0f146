#!/usr/bin/env python3
"""Table 5.4's candidate effects, one at a time and together, through the simulator over the whole
test day (prints figures; not a test).

The three services share 8 units; the clients replay the test day shifted 0/8/16 h at ratios
0.15/0.4/0.15 (Table 5.4's setup: testbed.profiles.paper); a threshold policy (rule v2, or rule v1
where the row says so) and the shipped DRL agents (models/) decide every 30 s. Each row is a model
of a testbed, run for SEEDS seeds (request sizes, scrape phases, random choices): per service and
policy the mean reward (sd over seeds), SLO violation rate, instances and mean latency, and DRL
minus the rule, beside the paper's Table 5.4 and our local testbed's whole day (docs/table-5.4.md,
2026-11-29).

"today" is the local testbed as the simulator models it: its client (counts carried, each
second's requests from its start), its replicas (no rate limit, fixed start-up) and its balancer
(utilization integrated over the replicas in rotation: `Measurement(utilization="integral")`).
Every other row adds to it the effects it names; `all-rule-v1` is the paper's testbed as its code
describes it, and each `less-` row is that with one effect taken back (docs/table-5.4.md,
"Candidate effects", has each one's source in tu-nv/drafas).

    PYTHONPATH=. python3 bench/table54_effects.py [--seeds 5] [--rows today,drafas,...] [--models DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.profiles import ServiceProfile, default_profiles  # noqa: E402
from testbed.profiles.paper import (  # noqa: E402
    DEFAULT_RATIOS,
    REWARD_BETA,
    SERVICES,
    STEP_SECONDS,
    TABLE_5_4,
    TOTAL_UNITS,
)
from testbed.scaler.policies import RuleV1, RuleV2  # noqa: E402
from testbed.sim.cluster import DEFAULT_OPTIONS, TESTBED_OPTIONS, SimOptions, with_measure  # noqa: E402
from testbed.sim.measure import Measurement  # noqa: E402
from testbed.traces import PACKAGE, traces_folder  # noqa: E402
from testbed.train.evaluate import EvalRun, evaluate, test_day_traces  # noqa: E402

# Our local testbed's whole day, both policies (docs/table-5.4.md, "The whole day, both policies",
# 2026-11-29, dc00e3c): service -> policy -> (reward, SLO violation rate, instances)
LOCAL_DAY = {
    "chatbot": {"ppo": (-0.0330, 0.0053, 2.30), "rule_v2": (-0.0294, 0.0010, 2.26)},
    "imgcls": {"ppo": (-0.0227, 0.0032, 1.64), "rule_v2": (-0.0218, 0.0017, 1.66)},
    "tts": {"ppo": (-0.0290, 0.0020, 2.22), "rule_v2": (-0.0289, 0.0015, 2.24)},
}
# Seconds from a scale-down to the deleted pod leaving phase Running (so out of env.py:132's
# count). No terminationGracePeriodSeconds in ai_services/*.yaml: Kubernetes' 30 s. The TTS
# container's command is python3 itself (coqui-deployment.yaml:22), PID 1 without a SIGTERM
# handler, so SIGTERM is ignored and the pod runs until the grace period's SIGKILL; the other
# two servers exit on SIGTERM (uvicorn, pytorch-deployment.yaml:23; ollama serve), and the pod
# ends with the Istio sidecar's drain, 5 s by default. The step queries ~30 s after its patch
# (env.py:201-216), so only a pod that outlives that is counted once more.
TERMINATING_S = {"chatbot": 5.0, "imgcls": 5.0, "tts": 30.0}
# The startup probes' periods (ai_services/*.yaml: ollama exec every 6 s, pytorch and coqui
# httpGet every 2 s): a replica is ready at the first probe after its start-up
PROBE_S = {"chatbot": 6.0, "imgcls": 2.0, "tts": 2.0}

Profiles = dict[str, ServiceProfile]


def testbed_profiles() -> Profiles:
    """The local testbed's replicas: no rate limit, ready after exactly their start-up."""
    return {s: p.replace(rate_limit=None, startup_max_ms=None) for s, p in default_profiles().items()}


def with_rate_limit(p: Profiles) -> Profiles:
    """Envoy's local rate limit at each sidecar: the published simulator's limits (the same
    numbers as ai_services/*.yaml's token buckets: 14 per 1 s pytorch, 7 per 2 s ollama/coqui)."""
    return {s: x.replace(rate_limit=default_profiles()[s].rate_limit) for s, x in p.items()}


def with_spread_startup(p: Profiles) -> Profiles:
    """The published simulator's start-up: whole seconds uniform in [startup, 30]."""
    return {s: x.replace(startup_max_ms=default_profiles()[s].startup_max_ms) for s, x in p.items()}


def with_probe_startup(p: Profiles) -> Profiles:
    """Ready at the first startup probe after the start-up: whole seconds uniform in
    [startup, startup + probe period]."""
    return {s: x.replace(startup_max_ms=x.startup_ms + 1000.0 * PROBE_S[s]) for s, x in p.items()}


def with_ollama_queue(p: Profiles) -> Profiles:
    """OLLAMA_MAX_QUEUE=5 (ollama-deployment.yaml:34-35): 5 waiting, then 503."""
    return dict(p, chatbot=p["chatbot"].replace(queue_limit=5))


@dataclass
class Row:
    """One model of a testbed: the simulator's options, the replicas' profiles, the threshold
    policy, and whether deleted pods that outlive the step are counted one step more."""

    label: str
    options: SimOptions
    profiles: Callable[[Profiles], Profiles] = lambda p: p
    rule: type = RuleV2
    terminating: bool = False


DRAFAS = with_measure(TESTBED_OPTIONS, "drafas")
TODAY = replace(TESTBED_OPTIONS, measurement=Measurement(utilization="integral"))


def compose(*fs: Callable[[Profiles], Profiles]) -> Callable[[Profiles], Profiles]:
    def both(p: Profiles) -> Profiles:
        for f in fs:
            p = f(p)
        return p
    return both


PHYSICS_ALL = compose(with_rate_limit, with_probe_startup, with_ollama_queue)
CLUSTER = {"balancing": "random", "interference": True, "rounding": "floor"}
ALL = replace(DRAFAS, **CLUSTER)  # measure: drafas, and every cluster and client effect
FIXED = replace(DRAFAS.measurement, phase_drift=0.0)


def paper_model(label: str, options: SimOptions = ALL, profiles=PHYSICS_ALL, rule=RuleV1) -> Row:
    """The paper's testbed as its code describes it (`all-rule-v1`), or it with one effect taken
    back: the DRAFAS measurement, every cluster and client effect, rule v1 (drl.py:225)."""
    return Row(label, options, profiles, rule=rule, terminating=True)


ROWS = {
    "published": Row("the published simulator (Table 5.1's setup)", DEFAULT_OPTIONS,
                     lambda p: default_profiles()),
    "second": Row("utilization sampled on the client's second (compare_sim today)", TESTBED_OPTIONS),
    "today": Row("today's testbed model", TODAY),
    # the paper's way of measuring, one part at a time, then together (measure: drafas)
    "scraped": Row("+ each sidecar's gauge at its own 1 s scrape phase", replace(
        TODAY, measurement=Measurement(utilization="scraped"))),
    "drift": Row("+ the same, its phase drifting 1 ms/s against the client", replace(
        TODAY, measurement=Measurement(utilization="scraped", phase_drift=1e-3))),
    "running": Row("+ utilization divided by Running pods (starting ones too)",
                   replace(TODAY, util_counts_starting=True)),
    "scrape-window": Row("+ SLO, latency, rate by increase() between scrapes", replace(
        TODAY, measurement=Measurement(utilization="integral", slo_window="scrape"))),
    "terminating": Row("+ deleted TTS pod counted one step more (30 s grace)", TODAY,
                       terminating=True),
    "drafas": Row("measure: drafas (all four above)", DRAFAS),
    "drafas-fixed": Row("measure: drafas, each pod's phase fixed", replace(DRAFAS, measurement=FIXED)),
    "drafas-drift-0.3": Row("measure: drafas, the phase drifting 0.3 ms/s", replace(
        DRAFAS, measurement=replace(FIXED, phase_drift=3e-4))),
    "drafas-drift-3": Row("measure: drafas, the phase drifting 3 ms/s", replace(
        DRAFAS, measurement=replace(FIXED, phase_drift=3e-3))),
    "drafas-drift-10": Row("measure: drafas, the phase drifting 10 ms/s", replace(
        DRAFAS, measurement=replace(FIXED, phase_drift=1e-2))),
    "drafas-jitter": Row("measure: drafas, each scrape at a random instant of its second", replace(
        DRAFAS, measurement=replace(DRAFAS.measurement, scrape_jitter=1.0))),
    # how the paper's cluster and client were, one at a time (on today's model)
    "random": Row("+ random balancing (kube-proxy per connection)", replace(TODAY, balancing="random")),
    "interference": Row("+ MPS interference (InSS term, 2 GPUs x 4)", replace(TODAY, interference=True)),
    "rate-limit": Row("+ Envoy rate limit (429 = violation)", TODAY, with_rate_limit),
    "startup-30": Row("+ start-up uniform in [startup, 30 s]", TODAY, with_spread_startup),
    "startup-probe": Row("+ start-up + startup probe period", TODAY, with_probe_startup),
    "ollama-queue": Row("+ chatbot queue of 5 (OLLAMA_MAX_QUEUE)", TODAY, with_ollama_queue),
    "floor": Row("+ client truncates each second's count", replace(TODAY, rounding="floor")),
    "rule-v1": Row("+ the threshold policy is rule v1 (drl.py:225)", TODAY, rule=RuleV1),
    # the measurement with the effects that moved
    "drafas-rule-v1": Row("drafas + rule v1 (the two that the code states alone)", DRAFAS,
                          rule=RuleV1),
    "drafas-fixed-rule-v1": Row("the same, each pod's phase fixed", replace(
        DRAFAS, measurement=FIXED), rule=RuleV1),
    "drafas-half-rule-v1": Row("the same, the phase drifting 0.5 ms/s (an idle client's loop)",
                               replace(DRAFAS, measurement=replace(FIXED, phase_drift=5e-4)),
                               rule=RuleV1),
    "drafas-jitter-rule-v1": Row("the same, each scrape at a random instant of its second", replace(
        DRAFAS, measurement=replace(DRAFAS.measurement, scrape_jitter=1.0)), rule=RuleV1),
    "drafas-random": Row("drafas + random balancing", replace(DRAFAS, balancing="random")),
    "drafas-interference": Row("drafas + MPS interference", replace(DRAFAS, interference=True)),
    "drafas-both": Row("drafas + random balancing + interference",
                       replace(DRAFAS, balancing="random", interference=True)),
    "all": paper_model("drafas + every cluster and client effect, rule v2", rule=RuleV2),
    "all-rule-v1": paper_model("the same with rule v1 (the paper's testbed as its code says)"),
    # all-rule-v1 with one effect taken back at a time
    "less-measure": paper_model("all-rule-v1 read the harness's way (integral)", replace(
        ALL, measurement=TODAY.measurement, util_counts_starting=False)),
    "less-drift": paper_model("all-rule-v1, each pod's phase fixed", replace(ALL, measurement=FIXED)),
    "less-random": paper_model("all-rule-v1, round-robin", replace(ALL, balancing="round-robin")),
    "less-interference": paper_model("all-rule-v1, no interference", replace(ALL, interference=False)),
    "less-rate-limit": paper_model("all-rule-v1, no rate limit",
                                   profiles=compose(with_probe_startup, with_ollama_queue)),
    "less-floor": paper_model("all-rule-v1, counts carried", replace(ALL, rounding="carry")),
    "less-probe": paper_model("all-rule-v1, start-up exactly Table 4.4's",
                              profiles=compose(with_rate_limit, with_ollama_queue)),
    "less-queue": paper_model("all-rule-v1, chatbot queue of 11",
                              profiles=compose(with_rate_limit, with_probe_startup)),
    "less-jitter": paper_model("all-rule-v1, each scrape at a random instant of its second", replace(
        ALL, measurement=replace(DRAFAS.measurement, scrape_jitter=1.0))),
}


@dataclass
class Cell:
    """One service and policy over the seeds: per-seed (reward, SLO, instances, latency s)."""

    runs: list[tuple[float, float, float]] = field(default_factory=list)

    def mean(self, i: int) -> float:
        return statistics.fmean(r[i] for r in self.runs)

    def sd(self, i: int) -> float:
        return statistics.stdev(r[i] for r in self.runs) if len(self.runs) > 1 else 0.0


def run_row(row: Row, traces, agents, seeds: int) -> dict[tuple[str, str], Cell]:
    """Rule (v2, or the row's) and DRL over `seeds` seeds: (service, policy) -> Cell."""
    profiles = row.profiles(testbed_profiles())
    out: dict[tuple[str, str], Cell] = {}
    kinds = {"rule_v2": lambda: {s: row.rule.for_service(s) for s in SERVICES}}
    if agents is not None:
        kinds["ppo"] = lambda: agents
    for seed in range(seeds):
        for name, make in kinds.items():
            extra = dict.fromkeys(SERVICES, 0)  # replica-periods of deleted pods still Running
            removed = dict.fromkeys(SERVICES, 0)

            def note(d, extra=extra, removed=removed):
                extra[d.service] += removed[d.service]
                removed[d.service] = (-d.applied if d.applied < 0
                                      and TERMINATING_S[d.service] >= STEP_SECONDS else 0)

            res = evaluate(make(), traces, DEFAULT_RATIOS, seed=seed, profiles=profiles,
                           options=row.options,
                           run=EvalRun(on_decision=note if row.terminating else None))
            for s, r in res.items():
                more = extra[s] / max(r.steps, 1)
                reward = r.reward - REWARD_BETA * more / TOTAL_UNITS
                out.setdefault((s, name), Cell()).runs.append(
                    (reward, r.slo_violation_rate, r.instances + more, r.proc_time))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {', '.join(ROWS)}")
    ap.add_argument("--models", type=Path, default=ROOT / "models")
    ap.add_argument("--no-drl", action="store_true")
    ap.add_argument("--traces", type=traces_folder, default=PACKAGE)
    args = ap.parse_args()
    names = [n.strip() for n in args.rows.split(",") if n.strip()]
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        ap.error(f"unknown rows {', '.join(unknown)}; known: {', '.join(ROWS)}")
    traces = test_day_traces(args.traces)
    agents = None
    if not args.no_drl:
        from testbed.scaler.ppo import MaskablePpoPolicy

        agents = {s: MaskablePpoPolicy.load(args.models / f"{s}.zip", s) for s in SERVICES}
    started = time.time()
    print(f"Table 5.4's setup over the whole test day, {args.seeds} seeds; reward mean (sd), "
          "SLO violation rate, instances; DRL - rule v2\n")
    print("| model | service | rule reward (sd) | SLO | inst | latency s | DRL reward (sd) | SLO | "
          "inst | latency s | DRL - rule |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for service in SERVICES:
        paper, local = TABLE_5_4[service], LOCAL_DAY[service]
        p_r, p_d = paper["rule_v2"], paper["ppo"]
        print(f"| paper's testbed (Table 5.4) | {service} | {p_r['reward']:.4f} | "
              f"{p_r['slo_violation_rate']:.4f} | {p_r['instances']:.2f} | {p_r['proc_time_s']:.3f} | "
              f"{p_d['reward']:.4f} | {p_d['slo_violation_rate']:.4f} | {p_d['instances']:.2f} | "
              f"{p_d['proc_time_s']:.3f} | {p_d['reward'] - p_r['reward']:+.4f} |")
        lr, ld = local["rule_v2"], local["ppo"]
        print(f"| our local testbed's day (2026-11-29) | {service} | {lr[0]:.4f} | {lr[1]:.4f} | "
              f"{lr[2]:.2f} | - | {ld[0]:.4f} | {ld[1]:.4f} | {ld[2]:.2f} | - | "
              f"{ld[0] - lr[0]:+.4f} |")
    for name in names:
        row = ROWS[name]
        cells = run_row(row, traces, agents, args.seeds)
        for service in SERVICES:
            r = cells[(service, "rule_v2")]
            text = (f"| {name}: {row.label} | {service} | {r.mean(0):.4f} ({r.sd(0):.4f}) | "
                    f"{r.mean(1):.4f} | {r.mean(2):.2f} | {r.mean(3):.3f} |")
            d = cells.get((service, "ppo"))
            if d is None:
                text += " - | - | - | - | - |"
            else:
                text += (f" {d.mean(0):.4f} ({d.sd(0):.4f}) | {d.mean(1):.4f} | {d.mean(2):.2f} | "
                         f"{d.mean(3):.3f} | {d.mean(0) - r.mean(0):+.4f} |")
            print(text, flush=True)
    print(f"\n{time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
