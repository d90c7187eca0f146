"""Issue 15's floors for the seeds' policies on the GPU simulator (printed, not timed tests).

Usage: python3 bench/policies.py [--traces DIR] [--models DIR]
  1. fa2 keeps SLO violations <= 1.5 % at Table 5.1's load on the test day
  2. no policy's reward is above the share bound (the oracle for shares and batches)
  3. an fa2 decision for the three services takes < 50 ms (median of 200, test-day rates)
  4. `sim compare` for all policies at Table 5.1's load runs in < 2 minutes (models shipped)
Also prints the load average: the machine is shared, and time figures move with it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.cluster.base import ServiceTarget  # noqa: E402
from testbed.metrics.window import WindowMetrics  # noqa: E402
from testbed.profiles import default_profiles  # noqa: E402
from testbed.scaler.fa2 import Fa2Policy  # noqa: E402
from testbed.scaler.target import ClusterView, ServiceView  # noqa: E402
from testbed.traces import PACKAGE, traces_folder  # noqa: E402


def decision_ms(samples: int = 200) -> float:
    pol = Fa2Policy(default_profiles())
    times = []
    for k in range(samples):
        rates = {"chatbot": 1 + k % 9, "imgcls": 3 + k % 17, "tts": 1 + k % 7}
        view = ClusterView(
            {s: ServiceView(s, WindowMetrics(s, 30.0, r * 30, r * 30, 0, 0.5, 1), ServiceTarget(1), 25.0)
             for s, r in rates.items()},
            (100.0, 100.0),
            25.0,
        )
        t = time.perf_counter()
        pol.plan(view)
        times.append(1000 * (time.perf_counter() - t))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=traces_folder, default=PACKAGE,
                    help="trace folder with train/, val/, test/ (default: the paper's, shipped with testbed)")
    ap.add_argument("--models", default=str(ROOT / "models"))
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    ms = decision_ms()
    verdict = "met" if ms < 50 else "NOT met"
    print(f"fa2 decision, three services: median {ms:.2f} ms  (floor < 50 ms: {verdict})")
    out = ROOT / "runs" / "bench-policies"
    cmd = [sys.executable, "-m", "testbed", "sim", "compare", "--traces", args.traces,
           "--models", args.models, "--load", "5.1", "--json", "--out", str(out)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - t
    if proc.returncode:
        sys.exit(proc.stderr)
    import json

    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    print(f"{'policy':8} {'SLO viol':>9} {'share u':>8} {'req/s':>7} {'reward':>8} {'bound':>8} "
          f"{'ms/step':>8}")
    for r in rows:
        print(f"{r['policy']:8} {r['slo_violation_rate']:9.4f} {r['share_units']:8.3f} "
              f"{r['throughput']:7.2f} {r['reward']:8.4f} {r['bound']:8.4f} {r['decide_ms']:8.2f}")
    fa2 = next(r for r in rows if r["policy"] == "fa2")
    print(f"fa2 SLO violations at Table 5.1: {100 * fa2['slo_violation_rate']:.2f} %  "
          f"(floor <= 1.5 %: {'met' if fa2['slo_violation_rate'] <= 0.015 else 'NOT met'})")
    above = [r["policy"] for r in rows if r["reward"] > r["bound"]]
    print(f"policies above the share bound: {above or 'none'}  (floor: none)")
    for r in rows:
        above_s = [s for s, v in r["per_service"].items() if v["reward"] > v["bound"]]
        if above_s:
            print(f"  {r['policy']}: above the bound for {above_s}")
    print(f"sim compare, {len(rows)} policies at Table 5.1: {wall:.0f} s  (floor < 120 s: "
          f"{'met' if wall < 120 else 'NOT met'}); load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
