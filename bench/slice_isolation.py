#!/usr/bin/env python3
"""Slice isolation on the local data plane (prints figures; not a test). Needs root and iperf3.

Link 100 Mbit/s; slice "ai" guaranteed 20 Mbit/s, slice "be" best effort. One iperf3 flow in
"ai" against 10, 20 and 40 flows in "be", uplink then downlink, with and without slicing.
Floors: with slicing the ai flow keeps >= 95 % of 20 Mbit/s at 40 flows; `up` < 5 s and
`down` < 2 s for the default testbed; 100 up/down cycles leave nothing behind.

    python3 bench/slice_isolation.py [--duration 10] [--cycles 100] [--plot isolation.png]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from testbed.bringup.local import LocalTestbed, netns_list
from testbed.config import load_testbed
from testbed.net.cmd import Runner
from testbed.net.iperf import IperfSession

console = Console()
GUARANTEE = 20.0


def spec(name: str, slicing: bool):
    base = load_testbed()
    return base.model_copy(update={"name": name, "link": base.link.model_copy(
        update={"capacity_mbit": 100.0, "slicing": slicing})})


def cell(slicing: bool, flows: int, reverse: bool, duration: float, omit: int) -> dict:
    # "be" starts one second early and leaves that second out too, so both measured windows
    # cover the same span, all of it under contention.
    with LocalTestbed(spec("bench", slicing)) as tb:
        be = IperfSession.start(tb.topology, "be", flows=flows, duration=duration,
                                omit=omit + 1, reverse=reverse)
        time.sleep(1.0)
        ai = IperfSession.start(tb.topology, "ai", flows=1, duration=duration, omit=omit,
                                reverse=reverse)
        r_ai, r_be = ai.wait(), be.wait()
    return {"slicing": slicing, "flows": flows, "direction": r_ai.direction,
            "ai_mbit": r_ai.total_mbit, "be_mbit": r_be.total_mbit,
            "ai_rtt_ms": r_ai.mean_rtt_ms, "be_rtt_ms": r_be.mean_rtt_ms,
            "ai_retransmits": r_ai.retransmits}


def leftovers() -> list[str]:
    ns = [n for n in netns_list(Runner()) if n.startswith("tb-bench")]
    procs = subprocess.run(["pgrep", "-f", "iperf3 -s"], capture_output=True, text=True).stdout
    return ns + [f"pid {p}" for p in procs.split()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--omit", type=int, default=2, help="seconds of slow start left out")
    ap.add_argument("--flows", type=int, nargs="+", default=[10, 20, 40])
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--plot", type=Path, help="write a bar chart (PNG)")
    args = ap.parse_args()

    cells = []
    plan = [(s, f, r) for r in (False, True) for s in (True, False) for f in args.flows]
    with Progress(console=console) as progress:
        task = progress.add_task("isolation cells", total=len(plan))
        for slicing, flows, reverse in plan:
            cells.append(cell(slicing, flows, reverse, args.duration, args.omit))
            progress.advance(task)

    table = Table(title=f"Slice isolation: 1 ai flow vs N be flows, {args.duration:g} s each "
                        f"(first {args.omit} s omitted), link 100 Mbit/s, ai guaranteed 20")
    for col in ("direction", "slicing", "be flows", "ai Mbit/s", "ai % of 20", "ai RTT ms",
                "be Mbit/s", "be RTT ms"):
        table.add_column(col, justify="right")
    for c in cells:
        table.add_row(c["direction"], "on" if c["slicing"] else "off", str(c["flows"]),
                      f"{c['ai_mbit']:.2f}", f"{100 * c['ai_mbit'] / GUARANTEE:.0f} %",
                      _f(c["ai_rtt_ms"]), f"{c['be_mbit']:.2f}", _f(c["be_rtt_ms"]))
    console.print(table)

    ups, downs = [], []
    with Progress(console=console) as progress:
        task = progress.add_task("up/down cycles", total=args.cycles)
        for _ in range(args.cycles):
            tb = LocalTestbed(spec("bench", True))
            t0 = time.perf_counter()
            tb.up()
            t1 = time.perf_counter()
            tb.down()
            t2 = time.perf_counter()
            ups.append(t1 - t0)
            downs.append(t2 - t1)
            progress.advance(task)
    left = leftovers()
    console.print(f"up   (default testbed): median {statistics.median(ups):.3f} s, "
                  f"max {max(ups):.3f} s  (floor < 5 s)")
    console.print(f"down (default testbed): median {statistics.median(downs):.3f} s, "
                  f"max {max(downs):.3f} s  (floor < 2 s)")
    console.print(f"{args.cycles} up/down cycles: {len(left)} leftovers {left or ''}")

    worst = min(c["ai_mbit"] for c in cells if c["slicing"] and c["flows"] == max(args.flows))
    floor_ok = worst >= 0.95 * GUARANTEE
    console.print(f"floor: ai flow with slicing at {max(args.flows)} flows keeps "
                  f"{worst:.2f} Mbit/s = {100 * worst / GUARANTEE:.0f} % of 20 "
                  f"({'PASS' if floor_ok else 'FAIL'})")
    if args.json:
        args.json.write_text(json.dumps({"cells": cells, "up_s": ups, "down_s": downs,
                                         "leftovers": left}, indent=1))
    if args.plot:
        plot(cells, args.flows, args.plot)
        console.print(f"plot: {args.plot}")
    return 0 if floor_ok and not left and max(ups) < 5 and max(downs) < 2 else 1


def _f(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}"


def plot(cells: list[dict], flows: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    width = 0.38
    for ax, direction in zip(axes, ("uplink", "downlink"), strict=True):
        for k, slicing in enumerate((True, False)):
            ys = [next(c["ai_mbit"] for c in cells if c["direction"] == direction
                       and c["slicing"] == slicing and c["flows"] == f) for f in flows]
            xs = [i + (k - 0.5) * width for i in range(len(flows))]
            ax.bar(xs, ys, width, label="slice on" if slicing else "slice off")
        ax.axhline(GUARANTEE, color="k", linestyle="--", linewidth=1, label="guarantee 20 Mbit/s")
        ax.set_xticks(range(len(flows)), [str(f) for f in flows])
        ax.set_xlabel("best-effort iperf3 flows")
        ax.set_title(f"ai flow goodput, {direction}")
    axes[0].set_ylabel("Mbit/s")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
