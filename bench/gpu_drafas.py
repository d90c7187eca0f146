"""The GPU simulator in DRAFAS's configuration against the DRAFAS simulator, period for period.

Usage: python3 bench/gpu_drafas.py [--traces DIR] [--table 5.1 --table 5.2 --table 5.3] [--seed 0]
Rule v2 on the test day on both (`SimCluster`, and `GpuSimCluster` with 25 % slices, batch 1 and
no interference); prints, per table, how many service-periods differ in each column (decision,
free units, arrivals, counted and violating requests, utilization) and each service's mean reward
on both. Every column should read 0 and the rewards agree (docs/seeds.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.profiles import default_profiles, paper  # noqa: E402
from testbed.scaler.loop import ScalerLoop  # noqa: E402
from testbed.scaler.policies import RuleV2  # noqa: E402
from testbed.sim.cluster import SimCluster  # noqa: E402
from testbed.sim.gpu import UNIT_PCT, GpuSimCluster  # noqa: E402
from testbed.traces import PACKAGE, traces_folder  # noqa: E402
from testbed.train.evaluate import test_day_traces  # noqa: E402

COLUMNS = ("decision", "free units", "arrivals", "counted", "violations", "utilization")


def run(cluster, services: list[str]) -> tuple[np.ndarray, np.ndarray, float]:
    loop = ScalerLoop(cluster, {s: RuleV2.for_service(s) for s in services}, cluster.latest_window,
                      clock=lambda: cluster.now)
    rows, rewards = [], []
    started = time.perf_counter()
    while not cluster.done:
        cluster.advance()
        for s in services:
            d = loop.decide(s)
            w = cluster.latest_window(s)
            rows.append((d.replicas_after, d.free_units, w.arrivals, w.completed, w.violations,
                         w.utilization))
            rewards.append(d.reward)
    return np.array(rows, dtype=float), np.array(rewards).reshape(-1, len(services)), \
        time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=traces_folder, default=PACKAGE,
                    help="trace folder with train/, val/, test/ (default: the paper's, shipped with testbed)")
    ap.add_argument("--table", action="append", default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    services = list(paper.SERVICES)
    traces = test_day_traces(args.traces, services)
    profiles = {s: default_profiles()[s] for s in services}
    for key in args.table or ["5.1", "5.2", "5.3"]:
        spec = paper.PAPER_TABLES[key]
        gpus = int(spec.total_units * UNIT_PCT / 100)
        drafas, r_d, t_d = run(SimCluster(profiles, traces, spec.ratios, total_units=spec.total_units,
                                          seed=args.seed), services)
        gpu, r_g, t_g = run(GpuSimCluster(profiles, traces, spec.ratios, gpus=gpus, seed=args.seed,
                                          interference=False), services)
        same_shape = drafas.shape == gpu.shape
        diffs = [int(np.sum(np.abs(drafas[:, k] - gpu[:, k]) > 1e-9)) if same_shape else -1
                 for k in range(len(COLUMNS))]
        print(f"Table {key} ({spec.total_units} units, {len(drafas)} service-periods; DRAFAS {t_d:.1f} s, "
              f"GPU {t_g:.1f} s): periods that differ: "
              + ", ".join(f"{c} {n}" for c, n in zip(COLUMNS, diffs, strict=True)))
        for j, s in enumerate(services):
            print(f"  {s:8} reward DRAFAS {r_d[:, j].mean():.15f}  GPU {r_g[:, j].mean():.15f}")


if __name__ == "__main__":
    main()
