"""Fidelity: rule-based v2 (Table 4.10 thresholds) on the test day vs Table 5.1's rule-based column.

Usage: python3 bench/sim_fidelity.py [--traces DIR] [--queue N ...] [--seeds N]
Also prints the validation-day figures beside Table 4.11. The queue size per instance is not in the
paper; --queue sweeps it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.scaler.policies import RuleV2
from testbed.sim.evaluate import evaluate, test_day_traces
from testbed.sim.paper import DEFAULT_RATIOS, PROFILES, TABLE_4_11, TABLE_5_1
from testbed.sim.trace import read_trace


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default="../shared/traces")
    ap.add_argument("--queue", type=int, nargs="*", default=[10])
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    test = test_day_traces(args.traces)
    val = read_trace(Path(args.traces) / "val" / "day6.txt")
    for q in args.queue:
        profiles = {s: dataclasses.replace(p, queue_size_per_inst=q) for s, p in PROFILES.items()}
        print(f"\nqueue_size_per_inst = {q}; mean of {args.seeds} seeds")
        print(
            f"{'set':5} {'service':8} {'SLO ours':>9} {'paper':>7} {'inst ours':>9} {'paper':>7} "
            f"{'reward ours':>11} {'paper':>8} {'reward diff':>11}"
        )
        for name, traces, table, together in (
            ("test", test, TABLE_5_1, True),
            ("val", {s: val for s in test}, TABLE_4_11, False),
        ):
            sums = {s: [0.0, 0.0, 0.0] for s in test}
            for seed in range(args.seeds):
                groups = [list(test)] if together else [[s] for s in test]
                for group in groups:
                    res = evaluate(
                        {s: RuleV2.for_service(s) for s in group},
                        {s: traces[s] for s in group},
                        DEFAULT_RATIOS,
                        seed=seed,
                        profiles=profiles,
                    )
                    for s, r in res.items():
                        sums[s][0] += r.slo_violation_rate / args.seeds
                        sums[s][1] += r.instances / args.seeds
                        sums[s][2] += r.reward / args.seeds
            for s, (slo, inst, rew) in sums.items():
                ref = table.results["rule_v2"][s]
                diff = (rew - ref.reward) / abs(ref.reward)
                print(
                    f"{name:5} {s:8} {slo:9.4f} {ref.slo_violation_rate:7.4f} {inst:9.3f} "
                    f"{ref.instances:7.3f} "
                    f"{rew:11.5f} {ref.reward:8.5f} {diff:+10.1%}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
