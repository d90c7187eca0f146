"""The lab's busy meter: a reverse proxy in each service pod, in front of the server (Ollama, the
ResNet152 server, Coqui TTS), that counts the requests in flight to it and exports the replica's
busy seconds (`testbed_replica_busy_seconds_total`, the integral of min(in_flight, capacity) /
capacity) on /metrics, as the local load balancer does per replica.

This module imports nothing of the harness (aiohttp and prometheus-client only), so its image
needs this one file (workloads/meter/). The local load balancer uses its `BusyMeter` too.

The series carries no `namespace`/`pod`/`app` labels: on the lab, Prometheus's pod relabelling adds
them (and would rename labels the target set itself). Istio's agent merges the series into the
sidecar's scrape through the pod's `prometheus.io/*` annotations.

    python3 -m testbed.metrics.meter --listen 0.0.0.0:8090 --upstream http://127.0.0.1:11434 \\
        --capacity 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

BUSY = "testbed_replica_busy_seconds_total"

# An emulated replica's answer carries its own time for the request (wall ms from its arrival to
# the answer on the replica's schedule: queue and processing time), the part a time scale
# compresses, and the replica's busy seconds so far (the integral of min(in_process, capacity) /
# capacity on that schedule). The load client records the first; the local balancer measures its
# windows and busy series from both, as the lab's busy meter measures in the pod.
SERVER_MS_HEADER = "X-Testbed-Server-Ms"
BUSY_S_HEADER = "X-Testbed-Busy-S"
# A load client's request carries the epoch second its schedule said to send it: at a time scale
# the emulated replica places its arrival on that schedule (testbed.cluster.replica).
DUE_HEADER = "X-Testbed-Due"


@dataclass
class BusyMeter:
    """One replica's in-flight count and the running integral of min(in_flight, capacity)/capacity."""

    capacity: int
    clock: Callable[[], float] = time.monotonic
    in_flight: int = 0
    _busy_s: float = 0.0
    _since: float = field(default=-1.0)
    # (own busy seconds, the replica's) at its first report; from then on the replica's count
    _reported_from: tuple[float, float] | None = None
    _reported: float = 0.0

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {self.capacity}")
        self._since = self.clock()

    def _advance(self) -> float:
        now = self.clock()
        if self._reported_from is None:
            self._busy_s += min(self.in_flight, self.capacity) / self.capacity * (now - self._since)
        self._since = now
        return now

    def reported(self, busy_s: float) -> None:
        """The replica's own busy seconds so far (BUSY_S_HEADER): from its first report on, the
        meter counts those rather than its in-flight time, which includes the network to it."""
        if self._reported_from is None:
            self._advance()
            self._reported_from = (self._busy_s, busy_s)
        self._reported = max(self._reported, busy_s)

    def started(self) -> None:
        self._advance()
        self.in_flight += 1

    def finished(self) -> None:
        self._advance()
        self.in_flight = max(self.in_flight - 1, 0)

    def busy_seconds(self) -> float:
        """Busy seconds up to now (the open stretch included; a reporting replica's up to its
        last answer), ever increasing."""
        self._advance()
        if self._reported_from is not None:
            own, theirs = self._reported_from
            return own + self._reported - theirs
        return self._busy_s


# headers that belong to one connection, not to the request: a proxy drops them both ways
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailers", "transfer-encoding", "upgrade", "host", "content-length"}


class _BusyCollector(Collector):
    def __init__(self, meter: BusyMeter):
        self.meter = meter

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(BUSY.removesuffix("_total"), "Seconds of min(in_flight, "
                                     "capacity)/capacity of this replica")
        family.add_metric([], self.meter.busy_seconds())
        yield family


class Meter:
    """The proxy and its /metrics; `app()` for aiohttp."""

    def __init__(self, upstream: str, capacity: int, timeout_s: float = 600.0):
        self.upstream = upstream.rstrip("/")
        self.busy = BusyMeter(capacity)
        self.timeout_s = timeout_s
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_BusyCollector(self.busy))
        self._session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_route("*", "/{tail:.*}", self._proxy)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, app: web.Application) -> None:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                              auto_decompress=False)

    async def _close(self, app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    async def _metrics(self, request: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest(self.registry))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def _proxy(self, request: web.Request) -> web.Response:
        assert self._session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        self.busy.started()
        try:
            async with self._session.request(
                    request.method, self.upstream + request.rel_url.raw_path_qs, data=body or None,
                    headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as up:
                data = await up.read()
                out = {k: v for k, v in up.headers.items() if k.lower() not in HOP_BY_HOP}
                return web.Response(body=data, status=up.status, headers=out)
        except (aiohttp.ClientError, TimeoutError, asyncio.TimeoutError) as exc:
            return web.json_response({"error": f"upstream: {type(exc).__name__}"}, status=502)
        finally:
            self.busy.finished()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m testbed.metrics.meter", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", default="0.0.0.0:8090", help="host:port to serve on")
    ap.add_argument("--upstream", required=True, help="the server's URL inside the pod")
    ap.add_argument("--capacity", type=int, default=1, help="requests it processes at once")
    args = ap.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    if args.capacity < 1 or not port.isdigit():
        ap.error("--capacity must be >= 1 and --listen host:port")
    meter = Meter(args.upstream, args.capacity)

    async def serve() -> None:
        runner = web.AppRunner(meter.app(), access_log=None, handle_signals=False)
        await runner.setup()
        await web.TCPSite(runner, host or "0.0.0.0", int(port)).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
