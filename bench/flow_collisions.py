#!/usr/bin/env python3
"""Which of a service's connections share a flow queue with an iperf3 flow, and what that costs
them (prints figures; not a test). Needs root and iperf3.

Runs one cell of the slicing scenario (one service, N uplink iperf3 flows, slice off, the
shipped bottleneck) and samples `ss -tin` in the UE namespaces every 0.5 s. Each connection's
port is hashed as the uplink filter hashes it (bits 1-8 of the UE's port: testbed.net.shaping),
so a client connection whose bucket an iperf3 flow also holds is one that queues behind it.
Per connection: its bucket, how many iperf3 flows share it, its median and largest RTT; then
the cell's mean latency. docs/slicing.md ("Where the tail comes from") has a run of it.

    python3 bench/flow_collisions.py [--service tts] [--flows 40] [--duration 20]
        [--setup up-fq-b30k] [--repeat 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.net.shaping import flow_bucket  # noqa: E402
from testbed.reproduce.slicing import SETUPS, slicing_scenario  # noqa: E402

ADDRS = re.compile(r"\s*\d+\s+\d+\s+\S+:(\d+)\s+\S+:\d+")
RTT = re.compile(r" rtt:([\d.]+)/")
QUEUES = 256  # the slicing scenarios' link.flow_queues


def sample(stop: threading.Event, out: list[tuple[str, str]]) -> None:
    """(namespace, `ss -tin` of its established TCP) for every UE namespace, every 0.5 s."""
    while not stop.is_set():
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for ns in (line.split()[0] for line in names.splitlines() if line):
            if ns.startswith("tb-") and "-ue-" in ns:
                ss = subprocess.run(["ip", "netns", "exec", ns, "ss", "-tinH", "state",
                                     "established"], capture_output=True, text=True).stdout
                out.append((ns, ss))
        stop.wait(0.5)


def connections(samples: list[tuple[str, str]]) -> tuple[dict[int, list[float]], set[int]]:
    """The ai UE's connections with their RTT samples (ms), and the be UE's ports."""
    ai: dict[int, list[float]] = defaultdict(list)
    be: set[int] = set()
    for ns, ss in samples:
        lines = ss.splitlines()
        for i, head in enumerate(lines):
            if not (m := ADDRS.match(head)):
                continue
            info = lines[i + 1] if i + 1 < len(lines) else ""
            port = int(m.group(1))
            if ns.endswith("-ue-ai"):
                rtt = RTT.search(info)
                ai[port] += [float(rtt.group(1))] if rtt else []
            else:
                be.add(port)
    return ai, be


def run_cell(service: str, flows: int, duration: float, setup: str) -> tuple[float, list]:
    from testbed.scenario.load import parse_scenario
    from testbed.scenario.runner import RunOptions, ScenarioRun

    text = slicing_scenario(SETUPS[setup], name="collisions", duration_s=duration,
                            services=[service], flows=[flows], slicing=[False])
    loaded = parse_scenario(text, "<flow collisions>", ROOT / "scenarios")
    samples: list[tuple[str, str]] = []
    stop = threading.Event()
    thread = threading.Thread(target=sample, args=(stop, samples), daemon=True)
    thread.start()
    try:
        run = ScenarioRun(loaded, RunOptions(out_root=ROOT / "runs" / "flow-collisions",
                                             progress=False))
        for cell in run.cells:
            run.run_cell(cell)
        result = run.finish()
    finally:
        stop.set()
        thread.join()
    row = next(r for r in result.rows if r.get("service") == service)
    return row["mean_latency_ms"], samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--service", default="tts", choices=["chatbot", "imgcls", "tts"])
    ap.add_argument("--flows", type=int, default=40)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--setup", default="up-fq-b30k", choices=sorted(SETUPS))
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    for k in range(args.repeat):
        mean, samples = run_cell(args.service, args.flows, args.duration, args.setup)
        ai, be = connections(samples)
        iperf_buckets = Counter(flow_bucket(p, QUEUES) for p in be)
        shared = [p for p in ai if iperf_buckets.get(flow_bucket(p, QUEUES))]
        print(f"cell {k + 1}: {args.service}, {args.flows} flows, no slice, {args.setup}: mean "
              f"{mean:.1f} ms; {len(shared)} of {len(ai)} connections share an iperf3 flow's "
              f"queue ({len(be)} iperf3 connections in {len(iperf_buckets)} buckets)")
        for port, rtts in sorted(ai.items(), key=lambda kv: -len(kv[1])):
            if not rtts:
                continue
            b = flow_bucket(port, QUEUES)
            print(f"  port {port:5d}  bucket {b:3d}  iperf3 flows in it "
                  f"{iperf_buckets.get(b, 0)}  RTT median {statistics.median(rtts):7.2f}"
                  f" ms  max {max(rtts):7.2f} ms  ({len(rtts)} samples)")
        time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
