"""Simulator speed: steps/s per service alone on the test day, at the paper's ratios and 8x them.

Usage: python3 bench/sim_speed.py [--traces DIR] [--steps N]
Each step is one 30 s period plus one decision of the named policy through ScalerLoop.
Floors (issue 5): 20x a per-request SimPy design, i.e. 10,800 (chatbot) and 4,400 (imgcls) steps/s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.profiles.paper import DEFAULT_RATIOS, SIMPY_BASELINE_STEPS_PER_S
from testbed.scaler.policies import RandomPolicy, RuleV2, StaticPolicy
from testbed.train.evaluate import evaluate, test_day_traces


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default="../shared/traces")
    ap.add_argument("--steps", type=int, default=2880)
    args = ap.parse_args()
    traces = test_day_traces(args.traces)
    print(f"{'service':8} {'load':>4} {'policy':8} {'steps/s':>9} {'x SimPy':>8} {'SLO viol':>8} {'inst':>6}")
    for load in (1, 8):
        for service in traces:
            for policy in (RuleV2.for_service(service), StaticPolicy(), RandomPolicy(0)):
                best = None
                for _ in range(3):
                    r = evaluate(
                        {service: policy},
                        {service: traces[service]},
                        {service: DEFAULT_RATIOS[service] * load},
                        max_steps=args.steps,
                    )[service]
                    best = r if best is None or r.steps_per_second > best.steps_per_second else best
                base = SIMPY_BASELINE_STEPS_PER_S.get(service)
                ratio = f"{best.steps_per_second / base:7.1f}x" if base else "      -"
                print(
                    f"{service:8} {load:>3}x {policy.name:8} {best.steps_per_second:9,.0f} {ratio:>8} "
                    f"{best.slo_violation_rate:8.4f} {best.instances:6.2f}",
                    flush=True,
                )
    all_policies = {s: RuleV2.for_service(s) for s in traces}
    r = evaluate(all_policies, traces, DEFAULT_RATIOS, max_steps=args.steps)
    print(
        f"all three sharing 8 units, rule_v2: {next(iter(r.values())).steps_per_second:,.0f} steps/s "
        "(each step advances and decides for three services)"
    )


if __name__ == "__main__":
    main()
