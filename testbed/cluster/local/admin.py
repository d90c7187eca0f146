"""A small HTTP control API on the load balancer's metrics port, so `testbed services scale|status|down`
can steer a LocalCluster that `testbed services up` runs in the foreground.

The metrics port listens on the service address, which UEs reach when the services run in the
data network's namespace: every /admin request must carry the per-run token
(`Authorization: Bearer <token>`) that `services up` keeps in a root-only file for the CLI.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import secrets
from pathlib import Path

import aiohttp
from aiohttp import web

from testbed.cluster.local.cluster import LocalCluster
from testbed.errors import StateError, TestbedError
from testbed.paths import LOCAL_ADMIN_PORT

DEFAULT_ADMIN_URL = f"http://127.0.0.1:{LOCAL_ADMIN_PORT}"


def new_token() -> str:
    return secrets.token_urlsafe(32)


def write_token(path: Path, token: str) -> None:
    """Write the token readable by its owner only (created 0600, never world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")


def read_token(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        raise StateError(f"no admin token at {path}: is `testbed services up` running with "
                         "that metrics port on this machine?") from None
    except OSError as exc:
        raise StateError(f"cannot read the admin token {path}: {exc.strerror}") from None


def add_admin_routes(cluster: LocalCluster, shutdown: asyncio.Event, token: str) -> None:
    """Call before the cluster starts: GET /admin/status, POST /admin/scale, POST /admin/shutdown,
    each refused (401) without `Authorization: Bearer <token>`."""
    if not token:
        raise ValueError("the admin API needs a token")
    expected = f"Bearer {token}".encode()

    def authorised(request: web.Request) -> bool:
        return hmac.compare_digest(request.headers.get("Authorization", "").encode(), expected)

    def refused() -> web.Response:
        return web.json_response({"error": "admin token required"}, status=401)

    async def status(request: web.Request) -> web.Response:
        if not authorised(request):
            return refused()
        return web.json_response(cluster.status())

    async def scale_request(request: web.Request) -> web.Response:  # POST: cluster.scale
        if not authorised(request):
            return refused()
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
        if not authorised(request):
            return refused()
        shutdown.set()
        return web.json_response({"stopping": True})

    app = cluster.lb.metrics_app
    app.router.add_get("/admin/status", status)
    app.router.add_post("/admin/scale", scale_request)
    app.router.add_post("/admin/shutdown", stop)


async def admin_call(url: str, method: str, path: str, body: dict[str, object] | None = None,
                     token: str | None = None) -> dict:
    """One control request; a cluster that is not running becomes a StateError."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s,
            s.request(method, url.rstrip("/") + path, json=body, headers=headers) as r,
        ):
            doc = await r.json(content_type=None)
            if r.status >= 400:
                raise StateError(str(doc.get("error", doc)))
            return doc
    except aiohttp.ClientConnectorError:
        raise StateError(
            f"no local cluster answers at {url} (start one with `testbed services up`)"
        ) from None
