"""The local profile's service load balancer: one listening port per service, round-robin over
ready replicas (testbed.metrics.service_balancer), a per-replica proxy count of in-flight requests
sampled every interval, and the metrics API (`window(seconds)` for the scaler, Prometheus text on
/metrics). Requests are forwarded at the HTTP message level (testbed.metrics.downstream and
upstream); the metrics API is an aiohttp app."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from testbed.clock import REAL_TIME, ScenarioClock
from testbed.metrics.downstream import ClientConnection
from testbed.metrics.exposition import BalancerMetrics
from testbed.metrics.mesh import MeshMetrics
from testbed.metrics.service_balancer import ServiceBalancer
from testbed.metrics.upstream import UpstreamPool
from testbed.metrics.window import WindowMetrics
from testbed.profiles import HEADER_TIMEOUT_S, ServiceProfile


@dataclass(frozen=True)
class BalancerAddress:
    """Where a `LoadBalancer` listens (`host`) and the address it gives out for its ports
    (`advertise_host`; None: `host`, or 127.0.0.1 where that is every interface)."""

    host: str = "127.0.0.1"
    advertise_host: str | None = None


class LoadBalancer:
    """All services' balancers plus the metrics endpoint. `async with LoadBalancer(...) as lb:`.

    Ports: `ports[service]` (0 = any free port) and `metrics_port`, on `address`; see
    `endpoint()` and `metrics_url` for where they ended up.
    """

    def __init__(
        self,
        profiles: dict[str, ServiceProfile],
        services: list[str] | None = None,
        *,
        address: BalancerAddress = BalancerAddress(),
        ports: dict[str, int] | None = None,
        metrics_port: int = 0,
        sample_interval_s: float = 1.0,
        upstream_timeout_s: float = 60.0,
        clock: ScenarioClock = REAL_TIME,
    ):
        names = services or list(profiles)
        self.clock = clock
        host = address.host
        self.host = host
        self.advertise_host = (address.advertise_host
                               or ("127.0.0.1" if host in ("0.0.0.0", "") else host))
        self.sample_interval_s = sample_interval_s
        self.metrics = BalancerMetrics([profiles[s].slo_ms / 1000.0 for s in names])
        # the lab mesh's series, read by `--metrics prometheus`; latencies are wall time, so the
        # SLO bucket is the time-scaled threshold the collector uses
        self.mesh = MeshMetrics([clock.wall(profiles[s].slo_ms) for s in names])
        self._pool = UpstreamPool()
        self.services = {
            s: ServiceBalancer(s, profiles[s], self.metrics, self._pool, upstream_timeout_s, clock,
                               self.mesh)
            for s in names
        }
        self._ports = dict(ports or {})
        self._metrics_port = metrics_port
        self.bound: dict[str, int] = {}
        self.metrics_app = web.Application()
        self.metrics_app.router.add_get("/metrics", self._prometheus)
        self.metrics_app.router.add_get("/window", self._window_json)
        self._runners: list[web.AppRunner] = []
        self._servers: list[asyncio.Server] = []
        self._sampler: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoadBalancer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        try:
            for name, sb in self.services.items():
                self.bound[name] = await self._listen(sb, self._ports.get(name, 0))
            self.bound["metrics"] = await self._serve(self.metrics_app, self._metrics_port)
        except BaseException:
            await self.aclose()
            raise
        self._sampler = asyncio.create_task(self._sample_loop())

    async def _listen(self, sb: ServiceBalancer, port: int) -> int:
        """Serve `sb`'s clients on `port` (0: any free one); returns the port."""
        def connection() -> ClientConnection:
            return ClientConnection(sb.handle, idle_timeout_s=HEADER_TIMEOUT_S,
                                    on_arrival=sb.collector.arrival, on_lost=sb._lost,
                                    clock=time.monotonic)

        server = await asyncio.get_running_loop().create_server(connection, self.host, port,
                                                                backlog=2048)
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    async def _serve(self, app: web.Application, port: int) -> int:
        # a connection that sends no whole request (headers included) in this long is closed
        runner = web.AppRunner(app, access_log=None, handle_signals=False,
                               keepalive_timeout=HEADER_TIMEOUT_S)
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(runner, self.host, port, backlog=2048)
        await site.start()
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def aclose(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            await asyncio.gather(self._sampler, return_exceptions=True)
            self._sampler = None
        for server in self._servers:
            server.close()
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
        self._servers.clear()
        self._pool.close()

    async def _sample_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_t = loop.time() + self.sample_interval_s
        while True:
            await asyncio.sleep(max(0.0, next_t - loop.time()))
            next_t += self.sample_interval_s
            for sb in self.services.values():
                sb.sample()

    def endpoint(self, service: str) -> str:
        return f"http://{self.advertise_host}:{self.bound[service]}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.advertise_host}:{self.bound['metrics']}"

    def window(self, seconds: float) -> dict[str, WindowMetrics]:
        """The scaler's input: one WindowMetrics per service over the last `seconds` of scenario
        time (wall seconds × time scale); rates and latencies come back in scenario time too."""
        clock = self.clock
        out = {}
        for name, sb in self.services.items():
            w = sb.window(clock.wall(seconds))
            out[name] = replace(w, seconds=clock.scenario(w.seconds), **{
                k: None if getattr(w, k) is None else clock.scenario(getattr(w, k))
                for k in ("mean_latency_ms", "p50_latency_ms", "p95_latency_ms", "p99_latency_ms",
                          "mean_upload_ms")})
        return out

    async def _prometheus(self, request: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest(self.metrics.registry)
                            + generate_latest(self.mesh.registry))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def _window_json(self, request: web.Request) -> web.Response:
        try:
            seconds = float(request.query.get("seconds", "30"))
        except ValueError:
            return web.json_response({"error": "seconds must be a number"}, status=400)
        from dataclasses import asdict

        return web.json_response({k: asdict(v) for k, v in self.window(seconds).items()})
