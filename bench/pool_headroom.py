"""What each service could reach with the units the others left it, Tables 5.1-5.2 (issue 11).

Usage: python3 bench/pool_headroom.py [--traces DIR] [--models DIR] [--tables 5.1,5.2] [--seed 0]

For each table and policy set (rule v2, the DRL agents in --models), runs the table once (seed
--seed), records the units every service held each period, and prints per service: its reward
and instances in the run, the oracle bound on its own trace with at most the instances the
other two left it in each period of that run (testbed.train.oracle's best_schedule with caps),
and the paper's cell.
A cell far from the paper whose capped oracle is close to the paper says the policy wastes what
it gets; a capped oracle worse than the paper says the neighbours left too little.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.profiles import default_profiles
from testbed.profiles.paper import PAPER_TABLES, SERVICES
from testbed.scaler.policies import RuleV2
from testbed.traces import PACKAGE, traces_folder
from testbed.train.evaluate import EvalRun, evaluate, test_day_traces
from testbed.train.oracle import best_schedule, static_slo_table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=traces_folder, default=PACKAGE,
                    help="trace folder with train/, val/, test/ (default: the paper's, shipped with testbed)")
    ap.add_argument("--models", default=str(Path(__file__).resolve().parents[1] / "models"))
    ap.add_argument("--tables", default="5.1,5.2")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from testbed.scaler.ppo import MaskablePpoPolicy

    traces = test_day_traces(args.traces)
    profiles = default_profiles()
    agents = {s: MaskablePpoPolicy.load(Path(args.models) / f"{s}.zip", s) for s in SERVICES}
    sets = {"rule_v2": {s: RuleV2.for_service(s) for s in SERVICES}, "drl": agents}
    print(
        f"{'table':5} {'policy':7} {'service':8} {'run':>8} {'inst':>5} {'units left':>10} "
        f"{'capped oracle':>13} {'inst':>5} {'free oracle':>11} {'paper':>8} {'inst':>5}"
    )
    for key in args.tables.split(","):
        t = PAPER_TABLES[key]
        # each service's per-count SLO table, once per table: both oracles and both policy sets use it
        width = {s: t.total_units // profiles[s].units for s in SERVICES}
        slo = {
            s: static_slo_table(profiles[s], traces[s], t.ratios[s], width[s], seed=args.seed)
            for s in SERVICES
        }
        free = {s: best_schedule(slo[s], total_units=t.total_units, units_per_instance=profiles[s].units,
                                 initial=profiles[s].initial_replicas) for s in SERVICES}
        for name, policies in sets.items():
            held: dict[str, list[int]] = {s: [] for s in SERVICES}

            def record(d, held=held) -> None:
                held[d.service].append(d.replicas_before * profiles[d.service].units)

            res = evaluate(
                policies, traces, t.ratios, total_units=t.total_units, seed=args.seed,
                run=EvalRun(on_decision=record),
            )
            for s in SERVICES:
                others = sum(np.asarray(held[o]) for o in SERVICES if o != s)
                caps = (t.total_units - others) // profiles[s].units
                capped = best_schedule(
                    slo[s], total_units=t.total_units, units_per_instance=profiles[s].units,
                    initial=profiles[s].initial_replicas, caps=caps,
                )
                ref = t.results[name][s]
                print(
                    f"{key:5} {name:7} {s:8} {res[s].reward:8.4f} {res[s].instances:5.2f} "
                    f"{float(np.mean(caps)):10.2f} {capped.reward:13.4f} {capped.instances:5.2f} "
                    f"{free[s].reward:11.4f} {ref.reward:8.4f} {ref.instances:5.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
