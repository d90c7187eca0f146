"""A small HTTP control API on the load balancer's metrics port, so `testbed services scale|status|down`
can steer a LocalCluster that `testbed services up` runs in the foreground."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from testbed.cluster.local import LocalCluster
from testbed.errors import StateError, TestbedError

DEFAULT_ADMIN_URL = "http://127.0.0.1:8000"


def add_admin_routes(cluster: LocalCluster, shutdown: asyncio.Event) -> None:
    """Call before the cluster starts: GET /admin/status, POST /admin/scale, POST /admin/shutdown."""

    async def status(request: web.Request) -> web.Response:
        return web.json_response(cluster.status())

    async def scale(request: web.Request) -> web.Response:
        try:
            doc = await request.json()
            service, replicas = str(doc["service"]), int(doc["replicas"])
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": 'body must be {"service": str, "replicas": int}'}, status=400)
        try:
            cluster.scale(service, replicas)
        except TestbedError as exc:
            return web.json_response({"error": str(exc)}, status=409)
        return web.json_response(cluster.status())

    async def stop(request: web.Request) -> web.Response:
        shutdown.set()
        return web.json_response({"stopping": True})

    app = cluster.lb.metrics_app
    app.router.add_get("/admin/status", status)
    app.router.add_post("/admin/scale", scale)
    app.router.add_post("/admin/shutdown", stop)


async def admin_call(url: str, method: str, path: str, body: dict[str, object] | None = None) -> dict:
    """One control request; a cluster that is not running becomes a StateError."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s,
            s.request(method, url.rstrip("/") + path, json=body) as r,
        ):
            doc = await r.json(content_type=None)
            if r.status >= 400:
                raise StateError(str(doc.get("error", doc)))
            return doc
    except aiohttp.ClientConnectorError:
        raise StateError(
            f"no local cluster answers at {url} (start one with `testbed services up`)"
        ) from None
