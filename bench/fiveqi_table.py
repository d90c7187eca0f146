#!/usr/bin/env python3
"""How 5QI priority and slice guarantees interact on the local data plane (prints figures; not a
test). Needs root and iperf3.

A 40 Mbit/s link with 16 flow queues per class (examples/asr-local.yaml's link). Slice "ai" is
guaranteed G Mbit/s, its one UE at a 5QI asking D Mbit/s (one paced TCP flow); the best-effort
slice "be" carries N bulk TCP flows, started a second early so that the measured window is all
under contention. Uplink. Prints the ai UE's and the bulk flows' rates per (G, 5QI, N), the
median of --repeat rounds, and the min-max.

    python3 bench/fiveqi_table.py [--guarantees 4,10] [--five-qis 9,80,5] [--flows 0,20]
                                  [--demand 12] [--duration 5] [--repeat 3]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from testbed.bringup.local import LocalTestbed
from testbed.config import TestbedSpec, load_testbed
from testbed.net.iperf import IperfSession
from testbed.net.shaping import htb_prio

console = Console()


def spec(guaranteed: float, five_qi: int) -> TestbedSpec:
    base = load_testbed()
    link = base.link.model_copy(update={"capacity_mbit": 40.0, "flow_queues": 16,
                                        "flow_queue_bytes": 30000})
    ai = base.slices[0].model_copy(update={"guaranteed_mbit": guaranteed})
    xr = base.ue_groups[0].model_copy(update={"name": "xr", "count": 1, "five_qi": five_qi})
    be = base.ue_groups[1].model_copy(update={"count": 1})
    return base.model_copy(update={"name": "bench5qi", "link": link,
                                   "slices": [ai, base.slices[1]], "ue_groups": [xr, be]})


def cell(guaranteed: float, five_qi: int, flows: int, demand: float, duration: float) -> tuple[float, float]:
    with LocalTestbed(spec(guaranteed, five_qi)) as tb:
        bulk = None
        if flows:
            bulk = IperfSession.start(tb.topology, "be", flows=flows, duration=duration + 1, omit=2)
            time.sleep(1.0)
        xr = IperfSession.start(tb.topology, "ai", flows=1, duration=duration, omit=1,
                                bitrate_mbit=demand)
        r_xr = xr.wait()
        r_bulk = bulk.wait() if bulk is not None else None
    return r_xr.total_mbit, (r_bulk.total_mbit if r_bulk is not None else 0.0)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--guarantees", default="4,10", help="the ai slice's guarantees, Mbit/s")
    ap.add_argument("--five-qis", default="9,80,5", help="the ai UE's 5QIs")
    ap.add_argument("--flows", default="0,20", help="bulk flows in the best-effort slice")
    ap.add_argument("--demand", type=float, default=12.0, help="the ai UE's paced rate, Mbit/s")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds measured per round")
    ap.add_argument("--repeat", type=int, default=3, help="rounds per cell (interleaved)")
    args = ap.parse_args()
    grid = list(itertools.product([float(g) for g in args.guarantees.split(",")],
                                  [int(q) for q in args.five_qis.split(",")],
                                  [int(n) for n in args.flows.split(",")]))
    got: dict[tuple, list[tuple[float, float]]] = {k: [] for k in grid}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("cells", total=len(grid) * args.repeat)
        for _ in range(args.repeat):
            for key in grid:
                got[key].append(cell(*key, args.demand, args.duration))
                progress.advance(task)
    table = Table(title=f"ai UE asking {args.demand:g} Mbit/s on a 40 Mbit/s link, uplink, "
                        f"median (min-max) of {args.repeat}")
    for col in ("guarantee Mbit/s", "5QI (HTB prio)", "bulk flows", "ai UE Mbit/s", "bulk Mbit/s"):
        table.add_column(col, justify="right")
    for (g, q, n), rows in got.items():
        table.add_row(f"{g:g}", f"{q} ({htb_prio(q)})", str(n), spread([r[0] for r in rows]),
                      spread([r[1] for r in rows]) if n else "-")
    console.print(table)


if __name__ == "__main__":
    main()
