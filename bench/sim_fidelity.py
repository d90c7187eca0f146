"""Fidelity: rule-based v2 (Table 4.10 thresholds) against the dissertation's rule-based columns.

Usage: python3 bench/sim_fidelity.py [--traces DIR] [--seeds N] [--queue N]
Prints, for each modelling variant, the test day at Table 5.1's ratios (the floor: reward within
10 %), the test day at Table 5.2's doubled ratios, and the validation day beside Table 4.11.
Variants: the first simulator (counts carried, only ready instances in utilization), the current
default (counts truncated per interval, starting instances in utilization; both as in the
dissertation's published simulator), and the default plus that simulator's per-instance rate
limits, which the dissertation's text never mentions.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.load.trace import load_trace
from testbed.profiles import default_profiles
from testbed.profiles.paper import AUTHOR_RATE_LIMITS, TABLE_4_11, TABLE_5_1, TABLE_5_2
from testbed.scaler.policies import RuleV2
from testbed.sim.cluster import SimOptions
from testbed.train.evaluate import evaluate, test_day_traces


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default="../shared/traces")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--queue", type=int, default=10)
    args = ap.parse_args()
    test = test_day_traces(args.traces)
    val = load_trace(Path(args.traces) / "val" / "day6.txt")
    base = {s: p.replace(queue_limit=args.queue) for s, p in default_profiles().items()}
    limited = {s: p.replace(rate_limit=AUTHOR_RATE_LIMITS[s]) for s, p in base.items()}
    variants = (
        ("before: carry, ready-only utilization", base, SimOptions("carry", False)),
        ("default: floor, starting in utilization", base, SimOptions()),
        ("default + author rate limits", limited, SimOptions()),
    )
    sets = (
        ("test x1", test, TABLE_5_1, True),
        ("test x2", test, TABLE_5_2, True),
        ("val", {s: val for s in test}, TABLE_4_11, False),
    )
    print(f"queue_limit = {args.queue}; mean of {args.seeds} seeds; rule-based v2")
    for title, profiles, options in variants:
        print(f"\n== {title}")
        print(
            f"{'set':8} {'service':8} {'SLO ours':>9} {'paper':>7} {'inst ours':>9} {'paper':>7} "
            f"{'proc ours':>9} {'paper':>7} {'reward ours':>11} {'paper':>8} {'diff':>7}"
        )
        for name, traces, table, together in sets:
            sums = {s: [0.0, 0.0, 0.0, 0.0] for s in test}
            for seed in range(args.seeds):
                groups = [list(test)] if together else [[s] for s in test]
                for group in groups:
                    res = evaluate(
                        {s: RuleV2.for_service(s) for s in group},
                        {s: traces[s] for s in group},
                        table.ratios,
                        seed=seed,
                        profiles=profiles,
                        options=options,
                    )
                    for s, r in res.items():
                        for i, v in enumerate((r.slo_violation_rate, r.instances, r.proc_time, r.reward)):
                            sums[s][i] += v / args.seeds
            for s, (slo, inst, proc, rew) in sums.items():
                ref = table.results["rule_v2"][s]
                diff = (rew - ref.reward) / abs(ref.reward)
                ref_proc = f"{ref.proc_time_s:7.4f}" if ref.proc_time_s is not None else f"{'-':>7}"
                print(
                    f"{name:8} {s:8} {slo:9.4f} {ref.slo_violation_rate:7.4f} {inst:9.3f} "
                    f"{ref.instances:7.3f} {proc:9.4f} {ref_proc} "
                    f"{rew:11.5f} {ref.reward:8.5f} {diff:+7.1%}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
