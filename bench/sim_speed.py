"""Simulator speed: steps/s per service alone on the test day, at the paper's ratios and 8x them,
and, with --reference DIR, against the dissertation's published SimPy simulator in the same run.

Usage: python3 bench/sim_speed.py [--traces DIR] [--steps N] [--reference DIR] [--repeat N]
Each step is one 30 s period plus one decision of the named policy through ScalerLoop.
--reference DIR: a checkout of github.com/tu-nv/drafas (needs `pip install simpy`). Both
simulators then run rule-based v2 for the three services sharing 8 units at Table 5.1's and 5.2's
ratios over the same steps of the test day, best of --repeat runs each, interleaved so both see
the same machine load; one step = every service advances 30 s and decides. Floor (issue 11): ours
>= 50x theirs per step. Every ratio it prints is of two runs measured here, now; without
--reference it prints our steps/s alone and says that the published simulator was not run.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from testbed.profiles.paper import DEFAULT_RATIOS, TABLE_5_1, TABLE_5_2
from testbed.scaler.policies import RandomPolicy, RuleV2, StaticPolicy
from testbed.train.evaluate import evaluate, test_day_traces

NOT_RUN = ("speed ratio: none; the published simulator was not run "
           "(--reference DIR runs it beside ours and prints the ratio of the two)")


def alone(traces, steps: int) -> None:
    print(f"{'service':8} {'load':>4} {'policy':8} {'steps/s':>9} {'SLO viol':>8} {'inst':>6}")
    for load in (1, 8):
        for service in traces:
            for policy in (RuleV2.for_service(service), StaticPolicy(), RandomPolicy(0)):
                best = None
                for _ in range(3):
                    r = evaluate(
                        {service: policy},
                        {service: traces[service]},
                        {service: DEFAULT_RATIOS[service] * load},
                        max_steps=steps,
                    )[service]
                    best = r if best is None or r.steps_per_second > best.steps_per_second else best
                print(
                    f"{service:8} {load:>3}x {policy.name:8} {best.steps_per_second:9,.0f} "
                    f"{best.slo_violation_rate:8.4f} {best.instances:6.2f}",
                    flush=True,
                )


def against_reference(traces_dir: str, ref_dir: str, steps: int, repeat: int) -> float:
    from drafas_reference import run_reference

    traces = test_day_traces(traces_dir)
    print(f"\nboth simulators, rule v2, three services sharing 8 units, {steps} steps, best of {repeat}")
    print(f"{'setup':9} {'ours steps/s':>12} {'published':>10} {'ratio':>7}   "
          f"{'ours CPU':>9} {'published':>10} {'ratio':>7}")
    worst = float("inf")
    for table in (TABLE_5_1, TABLE_5_2):
        ours = theirs = ours_cpu = theirs_cpu = 0.0
        for _ in range(repeat):
            r = evaluate(
                {s: RuleV2.for_service(s) for s in traces}, traces, table.ratios, max_steps=steps
            )
            # both: the stepping loop only, set-up excluded
            ours = max(ours, next(iter(r.values())).steps_per_second)
            ours_cpu = max(ours_cpu, next(iter(r.values())).steps_per_cpu_second)
            _, sps, cpu_sps = run_reference(ref_dir, traces_dir, table.ratios, total_units=8,
                                            steps=steps, with_cpu=True)
            theirs, theirs_cpu = max(theirs, sps), max(theirs_cpu, cpu_sps)
        ratio, cpu_ratio = ours / theirs, ours_cpu / theirs_cpu
        worst = min(worst, ratio)
        print(f"{table.name:9} {ours:12,.0f} {theirs:10,.1f} {ratio:6.1f}x   "
              f"{ours_cpu:9,.0f} {theirs_cpu:10,.1f} {cpu_ratio:6.1f}x", flush=True)
    load = os.getloadavg()[0]
    print(f"per-step speed ratio (worst setup, wall time): {worst:.1f}x (floor 50x); "
          f"load average {load:.1f}")
    return worst


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default="../shared/traces")
    ap.add_argument("--steps", type=int, default=2880)
    ap.add_argument("--reference", help="checkout of github.com/tu-nv/drafas: compare with it")
    ap.add_argument("--repeat", type=int, default=2, help="runs per simulator with --reference")
    args = ap.parse_args()
    if args.reference:
        against_reference(args.traces, args.reference, args.steps, args.repeat)
        return
    traces = test_day_traces(args.traces)
    alone(traces, args.steps)
    all_policies = {s: RuleV2.for_service(s) for s in traces}
    r = evaluate(all_policies, traces, DEFAULT_RATIOS, max_steps=args.steps)
    print(
        f"all three sharing 8 units, rule_v2: {next(iter(r.values())).steps_per_second:,.0f} steps/s "
        "(each step advances and decides for three services)"
    )
    print(NOT_RUN)


if __name__ == "__main__":
    main()
