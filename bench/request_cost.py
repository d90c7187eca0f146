#!/usr/bin/env python3
"""What one request costs the harness in CPU, per process group (prints figures; not a test).

Starts the local cluster (three services, replicas sleeping their profile's time, at a time
scale) with its in-process balancer in this process, and one load-client process per service
sending at a constant rate, as `testbed run` does. Reads each process's CPU seconds (user +
system, /proc/<pid>/stat) before and after the load and prints CPU milliseconds per completed
request for: the replicas (together), the balancer (this process), the clients (together), and
the kernel's softirq time (system-wide, /proc/stat: includes other work on the machine).
A refused request (503: a replica starved of CPU on a busy machine fills its queue) costs less
than a served one: the clients' errors are printed, and a run with many is not a fair figure.

Per-process CPU time is what a request costs wherever it runs, so the figures hold on a busy
machine (their wall-clock lateness does not; it is printed with /proc/loadavg for context).

Then the floor it is held against: the same clients, sending the same requests at the same
rates, to one bare aiohttp server process that reads each body and answers each service's
requests with an answer its replica gave (same shape, same bytes). The harness's CPU per request
over the floor's is the ratio DESIGN.md's "Pace and the clock" asks to keep small (issue 54: within
1.5x at time scale 16).

    python3 bench/request_cost.py [--time-scale 16] [--duration 10] [--rates 30,125,30]
    python3 bench/request_cost.py --haproxy            # also the floor through HAProxy
    python3 bench/request_cost.py --profile imgcls     # also py-spy an imgcls replica (needs py-spy)
    python3 bench/pyspy_top.py request_cost.pyspy.txt   # where its samples fall
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SERVICES = ("chatbot", "imgcls", "tts")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads)."""
    return sum(user_sys_s(pid))


def user_sys_s(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process `pid` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def softirq_s() -> float:
    """Softirq CPU seconds of the whole machine so far."""
    return int(Path("/proc/stat").read_text().split("\n", 1)[0].split()[7]) / TICK


def client_main(service: str, url: str, rate: float, duration: float, lead: float) -> None:
    """One load client at a constant rate; prints a JSON line of what it saw."""
    from testbed.load.client import ClientConfig, LoadClient
    from testbed.load.records import schedule_lag_ms
    from testbed.load.stats import percentile
    from testbed.load.trace import constant_schedule

    records: list[dict] = []

    async def run() -> None:
        sink = [lambda r: records.append(json.loads(r.to_json()))]
        async with LoadClient(ClientConfig(service, url), sink) as c:
            await c.run_open_loop(constant_schedule(rate, duration), lead_s=lead)

    asyncio.run(run())
    lags = [lag for r in records if (lag := schedule_lag_ms(r)) is not None]
    print(json.dumps({"service": service, "requests": len(records),
                      "errors": sum(1 for r in records if r.get("error")),
                      "error_kinds": dict(Counter(f"{r['error']} {r['status']}" for r in records
                                                  if r.get("error"))),
                      "p99_lateness_ms": percentile(lags, 0.99)}), flush=True)


def bare_server_main(answers_file: str, port_file: str) -> None:
    """The floor's server: one aiohttp process answering each service's path with its canned
    answer (answers_file: JSON of path -> [content type, body in latin-1]); writes its port."""
    from aiohttp import web

    answers = json.loads(Path(answers_file).read_text())

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        kind, body = answers[request.path]
        return web.Response(body=body.encode("latin-1"), content_type=kind)

    async def run() -> None:
        app = web.Application(client_max_size=64 << 20)
        for path in answers:
            app.router.add_route("*", path, answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        Path(port_file).write_text(str(site._server.sockets[0].getsockname()[1]))  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(run())


async def canned_answers(cluster) -> dict[str, tuple[str, str]]:
    """One answer per service from its replica: path -> (content type, body as latin-1)."""
    import aiohttp

    from testbed.load.api import build_request
    from testbed.load.content import ContentSet

    out = {}
    async with aiohttp.ClientSession() as session:
        for s in SERVICES:
            req = build_request(s, ContentSet(seed=1))
            async with session.request(req.method, cluster.endpoint(s) + req.target,
                                       data=req.body or None, headers=req.headers) as r:
                out[req.target.split("?")[0]] = (r.content_type, (await r.read()).decode("latin-1"))
    return out


def log_reader_main(path: str) -> None:
    """HAProxy's log reader: the Python a balancer built on HAProxy keeps, reading one log line per
    request (its captured X-Testbed-Server-Ms) as the harness's balancer records each request."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    seen = 0
    while True:
        line = sock.recv(4096)
        fields = line.split(b" {", 1)
        if len(fields) == 2:  # the captured response header: {server ms}
            seen += 1


HAPROXY_CONFIG = """global
    nbthread 1
    maxconn 4096
    log unix@{log} len 2048 local0
defaults
    mode http
    log global
    option httplog
    option http-keep-alive
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend clients
    bind 127.0.0.1:{port}
    capture response header X-Testbed-Server-Ms len 16
    default_backend replicas
backend replicas
    balance leastconn
    server bare 127.0.0.1:{upstream} maxconn 512
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_haproxy(tmp: Path, upstream: str) -> tuple[str, list[subprocess.Popen]]:
    """HAProxy in front of the bare server at `upstream` (its port), logging each request to a
    Python log reader: (its URL, [haproxy, the reader])."""
    log = tmp / "haproxy-log.sock"
    reader = subprocess.Popen([sys.executable, __file__, "--log-reader", str(log)])
    while not log.exists():
        await asyncio.sleep(0.02)
    port = free_port()
    cfg = tmp / "haproxy.cfg"
    cfg.write_text(HAPROXY_CONFIG.format(log=log, port=port, upstream=upstream))
    proxy = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)])
    for _ in range(200):
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            break
        except OSError:
            await asyncio.sleep(0.02)
    return f"http://127.0.0.1:{port}", [proxy, reader]


async def measure_floor(args: argparse.Namespace, answers: dict[str, tuple[str, str]],
                        rates: dict[str, float], via_haproxy: bool = False) -> dict:
    """The same clients against the bare server (`via_haproxy`: through HAProxy and its log
    reader): CPU seconds of the clients, the server (and HAProxy, and the reader)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "answers.json").write_text(json.dumps(answers))
        port_file = Path(tmp) / "port"
        server = subprocess.Popen([sys.executable, __file__, "--bare-server",
                                   str(Path(tmp) / "answers.json"), str(port_file)])
        extra: list[subprocess.Popen] = []
        try:
            while not port_file.exists() or not port_file.read_text():
                await asyncio.sleep(0.05)
            url = f"http://127.0.0.1:{port_file.read_text()}"
            if via_haproxy:
                url, extra = await start_haproxy(Path(tmp), port_file.read_text())
            lead = 1.0
            clients = {s: subprocess.Popen(
                [sys.executable, __file__, "--client", s, url, str(rates[s]), str(args.duration),
                 str(lead)], stdout=subprocess.PIPE, text=True) for s in SERVICES}
            await asyncio.sleep(lead * 0.8)
            pids = {"bare server": [server.pid], "clients": [p.pid for p in clients.values()]}
            if extra:
                pids |= {"haproxy": [extra[0].pid], "haproxy log reader": [extra[1].pid]}
            before = {g: sum(cpu_s(p) for p in ps) for g, ps in pids.items()}
            sirq0, w0 = softirq_s(), time.monotonic()
            await asyncio.sleep(args.duration * 0.85)
            after = {g: sum(cpu_s(p) for p in ps) for g, ps in pids.items()}
            sirq1, w1 = softirq_s(), time.monotonic()
            for p in clients.values():
                await asyncio.to_thread(p.wait)
            seen = [json.loads(p.stdout.read().strip().splitlines()[-1]) for p in clients.values()]
        finally:
            for proc in (server, *extra):
                proc.kill()
                proc.wait()
    n = sum(rates.values()) * (w1 - w0)
    return {"requests": n, "cpu_s": {g: after[g] - before[g] for g in pids},
            "softirq_s": sirq1 - sirq0, "wall_s": w1 - w0,
            "errors": sum(c["errors"] for c in seen)}


async def measure(args: argparse.Namespace) -> dict:
    from testbed.cluster.local import LocalCluster, LocalClusterConfig

    rates = dict(zip(SERVICES, (float(x) for x in args.rates.split(",")), strict=True))
    replicas = dict(zip(SERVICES, (int(x) for x in args.replicas.split(",")), strict=True))
    config = LocalClusterConfig(
        services=list(SERVICES),
        initial=replicas,
        time_scale=args.time_scale,
        sleep_only=True,
        use_espeak=False,
    )
    async with LocalCluster(config) as cluster:
        await cluster.wait_ready(120)
        lead = 1.0  # the clients' start-up lies outside the measured stretch
        clients = {s: subprocess.Popen(
            [sys.executable, __file__, "--client", s, cluster.endpoint(s), str(rates[s]),
             str(args.duration), str(lead)], stdout=subprocess.PIPE, text=True) for s in SERVICES}
        await asyncio.sleep(lead * 0.8)
        reps = {s: [r.proc.pid for r in cluster.replicas(s)] for s in SERVICES}
        pids = {"balancer": [os.getpid()], "clients": [p.pid for p in clients.values()],
                **{f"replicas {s}": reps[s] for s in SERVICES}}
        before = {g: sum(cpu_s(p) for p in ps) for g, ps in pids.items()}
        sys0 = {g: sum(user_sys_s(p)[1] for p in ps) for g, ps in pids.items()}
        sirq0, w0 = softirq_s(), time.monotonic()
        spy = None
        if args.profile:
            who = os.getpid() if args.profile == "balancer" else reps[args.profile][0]
            spy = subprocess.Popen(["py-spy", "record", "--nonblocking", "-r", "200", "-d",
                                    str(int(args.duration * 0.8)), "-f", "raw", "-o",
                                    str(args.profile_out), "-p", str(who)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        await asyncio.sleep(args.duration * 0.85)
        after = {g: sum(cpu_s(p) for p in ps) for g, ps in pids.items()}
        sys1 = {g: sum(user_sys_s(p)[1] for p in ps) for g, ps in pids.items()}
        sirq1, w1 = softirq_s(), time.monotonic()
        seen = [json.loads((await asyncio.to_thread(p.communicate))[0].strip().splitlines()[-1])
                for p in clients.values()]
        if spy is not None:
            await asyncio.to_thread(spy.wait)
        answers = await canned_answers(cluster) if args.floor else None
    done = {c["service"]: c for c in seen}
    # requests completed in the measured stretch: the constant rate over its length
    n = sum(rates.values()) * (w1 - w0)
    floor = await measure_floor(args, answers, rates) if answers else None
    proxied = await measure_floor(args, answers, rates, via_haproxy=True) \
        if answers and args.haproxy else None
    return {"time_scale": args.time_scale, "rates": rates, "wall_s": w1 - w0, "requests": n,
            "cpu_s": {g: after[g] - before[g] for g in pids}, "softirq_s": sirq1 - sirq0,
            "sys_s": {g: sys1[g] - sys0[g] for g in pids}, "clients": done,
            "loadavg": Path("/proc/loadavg").read_text().split()[:3],
            "floor": floor, "haproxy": proxied}


def show(res: dict) -> None:
    n = res["requests"]
    print(f"time scale {res['time_scale']:g}, {sum(res['rates'].values()):g} req/s "
          f"({', '.join(f'{s} {r:g}' for s, r in res['rates'].items())}), {res['wall_s']:.1f} s "
          f"measured, about {n:.0f} requests; loadavg {' '.join(res['loadavg'])}")
    print(f"{'process group':<18} {'CPU s':>7} {'CPU ms/request':>15} {'% of a core':>12} "
          f"{'system %':>9}")
    total = 0.0
    for g, c in [*res["cpu_s"].items(), ("kernel softirq*", res["softirq_s"])]:
        total += c
        own = ""  # a service's replicas: per request of that service too
        if g.startswith("replicas "):
            own = f"  ({1000 * c / (res['rates'][g[9:]] * res['wall_s']):.3f} per {g[9:]} request)"
        system = res.get("sys_s", {}).get(g)
        share = f"{100 * system / c:>8.0f}%" if system is not None and c else " " * 9
        print(f"{g:<18} {c:>7.2f} {1000 * c / n:>15.3f} {100 * c / res['wall_s']:>11.0f}% "
              f"{share}{own}")
    print(f"{'total':<18} {total:>7.2f} {1000 * total / n:>15.3f} {100 * total / res['wall_s']:>11.0f}%")
    print("* softirq is the whole machine's, other work included")
    floor = res.get("floor")
    if floor:
        f_total = sum(floor["cpu_s"].values()) + floor["softirq_s"]
        per = {g: 1000 * c / floor["requests"] for g, c in floor["cpu_s"].items()}
        f_ms = 1000 * f_total / floor["requests"]
        h_ms = 1000 * total / n
        print("floor: the same clients and requests to a bare aiohttp server: "
              + ", ".join(f"{g} {v:.3f}" for g, v in per.items())
              + f", softirq {1000 * floor['softirq_s'] / floor['requests']:.3f}; total "
              f"{f_ms:.3f} ms/request")
        print(f"harness / floor: {h_ms:.3f} / {f_ms:.3f} = {h_ms / f_ms:.2f}x (issue 54's goal: "
              "within 1.5x)")
    proxied = res.get("haproxy")
    if proxied:
        per = {g: 1000 * c / proxied["requests"] for g, c in proxied["cpu_s"].items()}
        print("the floor through HAProxy (leastconn, keep-alive, one log line per request read by "
              "Python): " + ", ".join(f"{g} {v:.3f}" for g, v in per.items())
              + f", softirq {1000 * proxied['softirq_s'] / proxied['requests']:.3f} ms/request; "
              f"client errors {proxied['errors']}")
        hop = per["haproxy"] + per["haproxy log reader"]
        print(f"a hop through HAProxy and its log reader: {hop:.3f} ms/request, against this "
              f"harness's balancer {1000 * res['cpu_s']['balancer'] / n:.3f}")
    for s, c in res["clients"].items():
        late = c["p99_lateness_ms"]
        print(f"client {s:<8} requests {c['requests']:>6}  errors {c['errors']:>5}  "
              f"p99 lateness {late if late is None else round(late, 1)} ms (wall)  "
              f"{c.get('error_kinds') or ''}")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        s, url, rate, dur, lead = sys.argv[2:7]
        client_main(s, url, float(rate), float(dur), float(lead))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--log-reader":
        log_reader_main(sys.argv[2])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--bare-server":
        bare_server_main(sys.argv[2], sys.argv[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-scale", type=float, default=16.0)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of load")
    ap.add_argument("--rates", default="30,125,30", help="req/s of chatbot,imgcls,tts")
    ap.add_argument("--replicas", default="2,4,2", help="replicas of chatbot,imgcls,tts")
    ap.add_argument("--profile", choices=(*SERVICES, "balancer"),
                    help="py-spy one replica of this service, or the balancer (py-spy's raw "
                         "stacks go to --profile-out; bench/pyspy_top.py sums them)")
    ap.add_argument("--profile-out", type=Path, default=Path("request_cost.pyspy.txt"))
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--no-floor", dest="floor", action="store_false",
                    help="skip the floor (the same clients against a bare server)")
    ap.add_argument("--haproxy", action="store_true",
                    help="also the floor through HAProxy (Debian's haproxy on PATH) and a Python "
                         "reader of its per-request log: what a C proxy's hop would cost")
    ap.add_argument("--rounds", type=int, default=1,
                    help="harness and floor this many times in turn; the median of the ratios "
                         "(each round's harness against the floor right after it, so a machine "
                         "whose load drifts moves both)")
    args = ap.parse_args()
    if args.haproxy and shutil.which("haproxy") is None:
        ap.error("--haproxy needs haproxy on PATH (apt-get install haproxy)")
    if args.profile and shutil.which("py-spy") is None:
        ap.error("--profile needs py-spy on PATH (pip install py-spy)")
    ratios = []
    for _ in range(args.rounds):
        res = asyncio.run(measure(args))
        show(res)
        if res.get("floor"):
            ratios.append(ratio(res))
        if args.json:
            args.json.write_text(json.dumps(res, indent=1))
    if len(ratios) > 1:
        print(f"harness / floor over {len(ratios)} rounds: median {statistics.median(ratios):.2f}x "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    return 0


def ratio(res: dict) -> float:
    """The round's harness CPU per request over its floor's (softirq included in both)."""
    harness = (sum(res["cpu_s"].values()) + res["softirq_s"]) / res["requests"]
    floor = res["floor"]
    return harness / ((sum(floor["cpu_s"].values()) + floor["softirq_s"]) / floor["requests"])


if __name__ == "__main__":
    sys.exit(main())
