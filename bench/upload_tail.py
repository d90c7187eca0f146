#!/usr/bin/env python3
"""What the flow-queue model adds on the data plane alone: loss and delay of image-sized uploads
and of a TTS-sized download beside uplink iperf3 flows (prints figures; not a test). Needs root
and iperf3.

No replicas and no load generator: in the "ai" UE an open-loop client sends 48 KB uploads (an
imgcls JPEG) at 30/s, 200 B requests (a chatbot prompt) at 10/s and 200 B requests for a 480 KB
answer (a TTS WAV, whose ACKs cross the congested uplink) at 10/s, over keep-alive connections
to a sink in the data network that answers each with one byte or the 480 KB; the time from send
to answer is the network's share of a request's latency. "be" runs N uplink iperf3 flows from
one second before the client starts. Per cell: p50/p90/p99, the share over 500 ms (imgcls's
SLO) in each third of the cell (a start-up transient shows in the first third only), the
download's mean and p99, the ai UE's TCP retransmissions, the bottleneck's drops, and the CPU's
busy share (the machine is shared).

    python3 bench/upload_tail.py [--depths 100 30] [--bytes 30000] [--flows 10 20 40]
        [--duration 15] [--slicing off] [--drop tail head] [--sets per-slice per-class]
        [--json OUT.json]

--depths are flow-queue limits in packets (link.flow_queue_packets), --bytes in bytes
(link.flow_queue_bytes, tail drop only; the default of slicing(-ci).yaml is 30000); --sets is
link.flow_queue_sets (per-slice, the default: the ai UE's connections never share a flow queue
with an iperf3 flow; per-class: each does with probability 1 - (255/256)^N).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

UPLOAD_BYTES = 48_000  # imgcls's JPEGs are 46-49 KB
UPLOAD_RATE = 30.0
SMALL_BYTES = 200
SMALL_RATE = 10.0
DOWNLOAD_BYTES = 480_000  # TTS's WAVs average ~489 KB
DOWNLOAD_RATE = 10.0
STREAMS = {  # kind: (request bytes, answer bytes, requests per second)
    "upload": (UPLOAD_BYTES, 1, UPLOAD_RATE),
    "small": (SMALL_BYTES, 1, SMALL_RATE),
    "download": (SMALL_BYTES, DOWNLOAD_BYTES, DOWNLOAD_RATE),
}
SLO_MS = 500.0
PORT = 5990


# --- the two ends (each runs inside a namespace, started by the bench) -----------------------

async def _sink(addr: str, port: int) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readexactly(8)
                await reader.readexactly(int.from_bytes(head[:4], "big"))
                writer.write(bytes(max(int.from_bytes(head[4:], "big"), 1)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, addr, port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


async def _client(src: str, dst: str, port: int, duration: float) -> None:
    idle: dict[str, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {
        kind: [] for kind in STREAMS}
    out: list[dict] = []
    t0 = time.monotonic()

    async def one(kind: str, sent: float) -> None:
        size, answer, _rate = STREAMS[kind]
        pool = idle[kind]
        conn = pool.pop() if pool else await asyncio.open_connection(
            dst, port, local_addr=(src, 0))
        reader, writer = conn
        try:
            writer.write(size.to_bytes(4, "big") + answer.to_bytes(4, "big") + bytes(size))
            await writer.drain()
            await asyncio.wait_for(reader.readexactly(answer), 10)
            ms = (time.monotonic() - sent) * 1000
            pool.append(conn)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            ms = None
            writer.close()
        out.append({"kind": kind, "t": sent - t0, "ms": ms})

    tasks: list[asyncio.Task] = []

    async def schedule(kind: str) -> None:  # open loop: never waits for answers
        rate = STREAMS[kind][2]
        for k in range(int(duration * rate)):
            at = t0 + k / rate
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            tasks.append(asyncio.create_task(one(kind, at)))

    await asyncio.gather(*(schedule(kind) for kind in STREAMS))
    await asyncio.gather(*tasks)
    print(json.dumps(out))


# --- the bench ---------------------------------------------------------------------------------

def cpu_busy() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)  # busy, total (idle, iowait out)


def snmp_retrans(ns: str) -> int:
    from testbed.net.cmd import in_ns

    lines = subprocess.run(in_ns(ns, ["cat", "/proc/net/snmp"]), capture_output=True, text=True,
                           check=True).stdout.splitlines()
    head, vals = [line.split() for line in lines if line.startswith("Tcp:")][:2]
    return int(vals[head.index("RetransSegs")])


def qdisc_drops(upf_ns: str, dev: str) -> int:
    raw = subprocess.run(["tc", "-n", upf_ns, "-s", "-j", "qdisc", "show", "dev", dev],
                         capture_output=True, text=True, check=True).stdout
    return sum(q.get("drops", 0) for q in json.loads(raw) if q.get("kind") != "htb")


def pct(vals: list[float], q: float) -> float | None:
    from testbed.scenario.results import percentile

    return percentile(vals, q)


def cell(depth: int, flows: int, slicing: bool, duration: float, name: str,
         drop: str = "tail", unit: str = "packets", sets: str = "per-slice") -> dict:
    from testbed.bringup.local import LocalTestbed
    from testbed.config import load_testbed
    from testbed.net.cmd import die_with_parent, in_ns
    from testbed.net.iperf import IperfSession

    base = load_testbed()
    limit = ({"flow_queue_packets": depth, "flow_queue_drop": drop} if unit == "packets"
             else {"flow_queue_bytes": depth})
    link = base.link.model_copy(update={"capacity_mbit": 100.0, "slicing": slicing,
                                        "flow_queues": 256, "flow_queue_sets": sets,
                                        "tcp_congestion": "bbr",  # as slicing(-ci).yaml
                                        **limit})
    spec = base.model_copy(update={"name": name, "link": link})
    load0, cpu0 = os.getloadavg()[0], cpu_busy()
    with LocalTestbed(spec) as tb:
        topo = tb.topology
        ue = topo.ues_of_slice("ai")[0]
        dn = str(topo.dn_addr)
        sink = subprocess.Popen(in_ns(topo.dn.name, [sys.executable, __file__, "--sink", dn]),
                                stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent())
        try:
            assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
            be = IperfSession.start(topo, "be", flows=flows, duration=duration + 2, omit=0)
            time.sleep(1.0)
            retrans0, drops0 = snmp_retrans(ue.host.name), qdisc_drops(topo.upf.name, tb.shapers[0].device)
            client = subprocess.run(
                in_ns(ue.host.name, [sys.executable, __file__, "--client", str(ue.address), dn,
                                     str(duration)]),
                capture_output=True, text=True, check=True, timeout=duration + 30)
            retrans = snmp_retrans(ue.host.name) - retrans0
            drops = qdisc_drops(topo.upf.name, tb.shapers[0].device) - drops0
            iperf = be.wait()
        finally:
            sink.kill()
            sink.wait()
    cpu1 = cpu_busy()
    recs = json.loads(client.stdout)
    row = {"depth": depth, "unit": unit, "drop": drop, "sets": sets, "flows": flows,
           "slicing": slicing,
           "duration_s": duration,
           "ai_retransmits": retrans, "bottleneck_drops": drops, "iperf_mbit": iperf.total_mbit,
           "load_before": load0, "load_after": os.getloadavg()[0],
           "cpu_busy": (cpu1[0] - cpu0[0]) / max(cpu1[1] - cpu0[1], 1)}
    for label in STREAMS:
        mine = [r for r in recs if r["kind"] == label]
        ok = [r["ms"] for r in mine if r["ms"] is not None]
        over = [r for r in mine if r["ms"] is None or r["ms"] > SLO_MS]
        thirds = []
        for k in range(3):
            part = [r for r in mine if k * duration / 3 <= r["t"] < (k + 1) * duration / 3]
            thirds.append(sum(r in over for r in part) / max(len(part), 1))
        row[label] = {"n": len(mine), "mean": sum(ok) / max(len(ok), 1), "p50": pct(ok, 0.5),
                      "p90": pct(ok, 0.9), "p99": pct(ok, 0.99), "over_slo": len(over) / len(mine),
                      "over_slo_by_third": thirds}
    return row


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--sink":
        asyncio.run(_sink(sys.argv[2], PORT))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        asyncio.run(_client(sys.argv[2], sys.argv[3], PORT, float(sys.argv[4])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depths", type=int, nargs="*", default=[100, 30],
                    help="flow-queue limits in packets (none: only --bytes)")
    ap.add_argument("--bytes", type=int, nargs="+", default=[],
                    help="flow-queue limits in bytes (link.flow_queue_bytes), tail drop")
    ap.add_argument("--flows", type=int, nargs="+", default=[10, 20, 40])
    ap.add_argument("--slicing", nargs="+", choices=["on", "off"], default=["off"])
    ap.add_argument("--drop", nargs="+", choices=["tail", "head"], default=["tail"],
                    help="which end of a full flow queue drops (link.flow_queue_drop)")
    ap.add_argument("--sets", nargs="+", choices=["per-slice", "per-class"],
                    default=["per-slice"], help="whose flows may share a flow queue "
                    "(link.flow_queue_sets)")
    ap.add_argument("--duration", type=float, default=15.0)
    ap.add_argument("--json", type=Path, help="append each cell's figures here (JSON lines)")
    args = ap.parse_args()

    print("sets      drop depth flows slice |  upload p50   p90   p99  >500ms  by third         "
          "| small p50 p99 | download mean p99 | retrans drops | iperf Mbit/s | load  cpu")
    plan = [(d, x, "packets", s, f, k) for d in args.drop for x in args.depths
            for s in args.slicing for f in args.flows for k in args.sets]
    plan += [("tail", x, "bytes", s, f, k) for x in args.bytes for s in args.slicing
             for f in args.flows for k in args.sets]
    for drop, depth, unit, slicing, flows, sets in plan:
        r = cell(depth, flows, slicing == "on", args.duration, f"ut{os.getpid() % 10000}", drop,
                 unit, sets)
        u, s, d = r["upload"], r["small"], r["download"]
        shown = f"{depth:5d}" if unit == "packets" else f"{depth // 1000:4d}k"
        print(f"{sets:9} {drop:>4} {shown} {flows:5d} {slicing:>5} | {u['p50']:9.0f} "
              f"{u['p90']:5.0f} {u['p99']:5.0f} {100 * u['over_slo']:5.1f}%  "
              f"{' '.join(f'{100 * x:4.1f}' for x in u['over_slo_by_third'])} % | "
              f"{s['p50']:6.1f} {s['p99']:5.1f} | {d['mean']:8.0f} {d['p99']:5.0f} | "
              f"{r['ai_retransmits']:7d} "
              f"{r['bottleneck_drops']:5d} | {r['iperf_mbit']:8.1f} | "
              f"{r['load_before']:4.1f} {100 * r['cpu_busy']:3.0f}%", flush=True)
        if args.json:
            with args.json.open("a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
