"""Why the agents read utilization differently on the testbed: the monitor's per-second samples
against where each second's requests arrive (prints figures; not a test).

Usage: python3 bench/sampling_phase.py [--traces DIR] [--start 13:30] [--minutes 20] [--replicas 2]

Runs the chatbot at a fixed replica count on a window of the test day (shift 0, ratio 0.15, no
rate limit or start-up jitter) and prints the mean sampled utilization for each arrival spacing
("ms": the published simulator's client, a gap before each request so the last of a second
arrives a few ms before the sample on the second; "even": the local testbed's client, the first
request of a second at the second, just after the sample) and for samples moved later within
each second (SimOptions.util_sample_phase).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.load.trace import load_trace
from testbed.profiles import default_profiles
from testbed.sim.cluster import SimCluster, SimOptions
from testbed.traces import PACKAGE, traces_folder

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=traces_folder, default=PACKAGE,
                    help="trace folder with train/, val/, test/ (default: the paper's, shipped with testbed)")
    ap.add_argument("--start", default="13:30")
    ap.add_argument("--minutes", type=int, default=20)
    ap.add_argument("--replicas", type=int, default=2)
    args = ap.parse_args()
    hours, minutes = (int(x) for x in args.start.split(":"))
    trace = load_trace(args.traces / "test" / "day7-shift0h.txt").window(
        0, hours * 3600 + minutes * 60, args.minutes * 60
    )
    profile = default_profiles()["chatbot"].replace(
        initial_replicas=args.replicas, rate_limit=None, startup_max_ms=None
    )
    phases = (0.0, 0.25, 0.5, 0.9)
    print(f"chatbot, {args.replicas} replicas, {args.start} + {args.minutes} min: mean sampled utilization")
    print("spacing  " + "  ".join(f"phase {p:4.2f}" for p in phases))
    for spacing in ("ms", "even"):
        row = []
        for phase in phases:
            options = SimOptions(spacing=spacing, util_sample_phase=phase)
            cluster = SimCluster({"chatbot": profile}, {"chatbot": trace}, {"chatbot": 0.15}, options=options)
            samples = []
            while not cluster.done:
                samples.append(cluster.advance()["chatbot"].utilization)
            row.append(float(np.mean(samples[1:])))
        print(f"{spacing:7s}  " + "  ".join(f"{u:10.3f}" for u in row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
