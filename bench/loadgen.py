"""Load-generator benchmark: constant 100, 500, 1000, 2000 req/s for 20 s from ONE client process
against a minimal aiohttp server in another process; prints achieved rate, send lateness p50/p99/max
and the client's (and server's) CPU seconds. Floor: 2000 req/s with p99 lateness < 5 ms. A last row
offers the floor rate to a server that holds every answer to the next 50 ms boundary, so answers
arrive in bursts of ~100: sending must stay on time while they are handled. Also prints each
service's request and response payload sizes (against emulated replicas).

    python3 bench/loadgen.py [--duration 20] [--rates 100,500,1000,2000] [--pin]

--pin puts the client on CPU 0 and the server on CPU 1 so they do not compete for one core.
--nice -N runs client and server at a higher CPU priority (root): on a machine shared with other
work, what remains of the lateness is waiting for a CPU, and this shows how much.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing as mp
import os
import resource
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiohttp import web
from aiohttp.test_utils import TestServer

from testbed.clock import ScenarioClock
from testbed.load.api import PreparedRequest, build_request
from testbed.load.client import ClientConfig, LoadClient
from testbed.load.content import ContentSet
from testbed.load.stats import percentile
from testbed.load.trace import constant_schedule

FLOOR_RATE, FLOOR_P99_MS = 2000, 5.0


def raise_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _serve(port_q: mp.Queue, cpu: int | None) -> None:
    import logging

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    raise_fd_limit()
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    async def ok(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"response": "ok"})

    async def burst(request: web.Request) -> web.Response:
        await request.read()
        now = asyncio.get_running_loop().time()
        await asyncio.sleep(BURST_S - now % BURST_S)
        return web.json_response({"response": "ok"})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/api/generate", ok)
        app.router.add_post("/burst/api/generate", burst)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        gc.freeze()  # the forked bench's imports: not worth scanning on every collection
        port_q.put(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(main())


BURST_S = 0.05


def cpu_seconds(pid: int | None = None) -> float:
    if pid is None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_rate(url: str, rate: float, duration: float, server_pid: int,
                   max_connections: int = 256) -> dict[str, float]:
    records = []
    req = PreparedRequest(
        "POST",
        "/api/generate",
        b'{"model":"m","prompt":"hi","stream":false}',
        {"Content-Type": "application/json"},
    )
    cfg = ClientConfig("chatbot", url, max_connections=max_connections)
    async with LoadClient(cfg, [records.append], request_factory=lambda: req) as client:
        # Open a few keep-alive connections first, as a long-running client would have.
        await client.run_closed_loop(workers=16, requests=64)
        records.clear()
        cpu0, srv0 = cpu_seconds(), cpu_seconds(server_pid)
        await client.run_open_loop(constant_schedule(rate, duration))
        cpu, srv_cpu = cpu_seconds() - cpu0, cpu_seconds(server_pid) - srv0
        pool = client._pool
        assert pool is not None
        conns, queued = pool.peak_connections, pool.waited
    late = sorted(r.lateness_ms for r in records)
    ok = [r for r in records if r.ok]
    first = min(r.sent for r in records)
    last = max(r.sent for r in records)
    return {
        "offered": rate,
        "sent": len(records),
        "ok": len(ok),
        "achieved": (len(records) - 1) / (last - first) if last > first else 0.0,
        "p50": percentile(late, 0.5) or 0.0,
        "p99": percentile(late, 0.99) or 0.0,
        "max": late[-1],
        "cpu": cpu, "server_cpu": srv_cpu, "conns": conns, "queued": queued,
        "errors": dict(Counter(r.error for r in records if r.error)),
        "lat_p50": statistics.median(r.latency_ms for r in ok) if ok else float("nan"),
    }


async def payload_sizes() -> list[tuple[str, int, int]]:
    from testbed.cluster.replica import EmulatedReplica
    from testbed.profiles import default_profiles

    out = []
    content = ContentSet(seed=0)
    import aiohttp

    for service, prof in default_profiles().items():
        replica = EmulatedReplica(service, prof.model_copy(update={"startup_ms": 0}),
                                  clock=ScenarioClock(100))
        async with TestServer(replica.app(), host="127.0.0.1") as srv, aiohttp.ClientSession() as s:
            ups, downs = [], []
            for _ in range(10):
                req = build_request(service, content)
                async with s.request(
                    req.method, str(srv.make_url(req.target)), data=req.body or None, headers=req.headers
                ) as r:
                    downs.append(len(await r.read()))
                ups.append(req.bytes_up)
            out.append((service, int(statistics.mean(ups)), int(statistics.mean(downs))))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--rates", default="100,500,1000,2000")
    ap.add_argument("--pin", action="store_true", help="client on CPU 0, server on CPU 1")
    ap.add_argument("--nice", type=int, default=0, help="niceness increment for client and server")
    args = ap.parse_args()
    raise_fd_limit()
    if args.nice:
        os.nice(args.nice)  # before the fork: the server inherits it
    q: mp.Queue = mp.Queue()
    server = mp.get_context("fork").Process(target=_serve, args=(q, 1 if args.pin else None), daemon=True)
    server.start()
    if args.pin:
        os.sched_setaffinity(0, {0})
    url = f"http://127.0.0.1:{q.get(timeout=30)}"
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} CPUs){', client/server pinned to CPU 0/1' if args.pin else ''}"
          f"{f', niceness {os.getpriority(os.PRIO_PROCESS, 0)}' if args.nice else ''}")
    try:
        print(
            f"{'offered/s':>9} {'sent':>7} {'ok':>7} {'achieved/s':>10} {'late p50 ms':>11} "
            f"{'p99 ms':>7} {'max ms':>7} {'client CPU s':>12} {'server CPU s':>12} {'conns':>5} "
            f"{'queued':>6} {'latency p50 ms':>14}"
        )
        results = []
        runs = [(float(x), url, "", 256) for x in args.rates.split(",")]
        # ~100 answers outstanding per burst: allow enough connections that none has to queue
        runs.append((float(FLOOR_RATE), url + "/burst", f"  answers in {BURST_S * 1000:.0f} ms bursts", 1024))
        for rate, target, note, max_conns in runs:
            r = asyncio.run(one_rate(target, rate, args.duration, server.pid, max_conns))
            if not note:
                results.append(r)
            print(
                f"{r['offered']:>9.0f} {r['sent']:>7d} {r['ok']:>7d} {r['achieved']:>10.1f} "
                f"{r['p50']:>11.3f} {r['p99']:>7.3f} {r['max']:>7.2f} {r['cpu']:>12.2f} "
                f"{r['server_cpu']:>12.2f} {r['conns']:>5d} {r['queued']:>6d} {r['lat_p50']:>14.3f}{note}",
                flush=True,
            )
            if r["errors"]:
                print(f"{'':>9} errors: {r['errors']}")
    finally:
        server.terminate()
        server.join(5)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\npayload sizes (mean of 10 requests against emulated replicas)")
    print(f"{'service':>8} {'request bytes':>13} {'response bytes':>14}")
    for service, up, down in asyncio.run(payload_sizes()):
        print(f"{service:>8} {up:>13d} {down:>14d}")
    floor = [r for r in results if r["offered"] >= FLOOR_RATE]
    if floor:
        r = floor[0]
        met = r["achieved"] >= 0.99 * FLOOR_RATE and r["p99"] < FLOOR_P99_MS and r["ok"] == r["sent"]
        print(
            f"\nfloor {FLOOR_RATE} req/s with p99 lateness < {FLOOR_P99_MS} ms: "
            f"{'MET' if met else 'NOT MET'} (achieved {r['achieved']:.1f}/s, p99 {r['p99']:.3f} ms)"
        )
        return 0 if met else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
