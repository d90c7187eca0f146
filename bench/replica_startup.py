"""Emulated-replica startup floor: how long a LocalCluster replica takes from launch to ready when
its profile asks for no startup time at all (the interpreter's start, imports, binding the port,
the cluster's first /healthz poll), and how exactly a profile startup time is kept once it is
above that floor. Each replica is started alone, one after another.

    python3 bench/replica_startup.py [--trials 5] [--service imgcls]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.cluster.local import LocalCluster, LocalClusterConfig
from testbed.profiles import default_profiles


async def startup_times(service: str, startup_ms: float, trials: int) -> list[float]:
    profile = default_profiles()[service].model_copy(update={"startup_ms": startup_ms})
    out = []
    config = LocalClusterConfig(
        profiles={service: profile},
        initial=0,
        use_espeak=False,
    )
    async with LocalCluster(config) as cluster:
        for n in range(1, trials + 1):
            cluster.scale(service, n)
            await cluster.wait_for(lambda n=n: cluster.ready_replicas(service) >= n, 60.0)
            out.append(max(r.ready_after_s or 0.0 for r in cluster.replicas(service)[-1:]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--service", default="imgcls", choices=["chatbot", "imgcls", "tts"])
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print(f"{'profile startup ms':>18} {'ready after: min s':>18} {'median s':>9} {'max s':>7}")
    for startup_ms in (0.0, 1000.0, 2000.0, 4000.0):
        times = asyncio.run(startup_times(args.service, startup_ms, args.trials))
        print(f"{startup_ms:>18.0f} {min(times):>18.3f} {statistics.median(times):>9.3f} {max(times):>7.3f}",
              flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
