"""The live page's HTTP server: the page and its assets, what a source folds as JSON, and a
server-sent event stream per browser (a snapshot, then a delta every POLL_S), on a socket bound
before the run starts.

It serves nothing else: no file of the run directory by its path but report.html and the PNGs of
its plots/, the folds' fields chosen one by one (`testbed.web.runfold`), and the assets named in
ASSETS. It runs beside a run in a process of its own (`python -m testbed.web.server`, started by
`testbed run --web`), so that the run's event loop, which runs the load balancer, never waits for
it; `testbed watch` serves in its own process. Several browsers share one fold: each poll's work
does not grow with them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import re
import signal
import socket
import sys
import threading
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web

from testbed.errors import StateError, TestbedError
from testbed.web.sources import ReproduceSource, RunSource

POLL_S = 0.5  # the page moves at least once a wall second
QUEUE_MAX = 64  # messages a browser may lag behind before it is dropped (it reconnects afresh)
KEEPALIVE_S = 15.0
STATIC = resources.files("testbed.web") / "static"
# the page and its assets, by the name the page asks for: nothing else of the package is served
ASSETS = {"live.js": "text/javascript", "live.css": "text/css",
          "uPlot.iife.min.js": "text/javascript", "uPlot.min.css": "text/css"}
PLOT = re.compile(r"^[A-Za-z0-9_.-]+\.png$")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
           "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                                      "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"}


def parse_address(text: str) -> tuple[str, int]:
    """`[HOST:]PORT` (`8080`, `0.0.0.0:8080`, `[::1]:0`) as (host, port); the host defaults to
    127.0.0.1 and port 0 takes a free one. StateError in one line on anything else.

    text: what the user gave."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host = "127.0.0.1"
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise StateError(f"--web {text!r}: expected [HOST:]PORT, e.g. 8080 or 127.0.0.1:0 "
                         "(0: a free port)")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or one StateError line when the port is taken or the
    address is not this machine's.

    host, port: `parse_address`'s."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise StateError(f"--web {host}:{port}: no such address ({exc.strerror})") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT only: not a listener
    try:
        sock.bind(addr)
        sock.listen(64)
    except OSError as exc:
        sock.close()
        if exc.errno == 98:  # EADDRINUSE
            raise StateError(f"--web {host}:{port}: the port is in use (another server or watch): "
                             "give another, or 0 for a free one") from None
        raise StateError(f"--web {host}:{port}: cannot listen there ({exc.strerror})") from None
    return sock


def url_of(sock: socket.socket) -> str:
    """The address a browser opens for a bound socket."""
    host, port = sock.getsockname()[:2]
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return f"http://{'[' + shown + ']' if ':' in shown else shown}:{port}/"


class LivePage:
    """The server of one source: its fold, polled every POLL_S, and its browsers' streams."""

    def __init__(self, source: RunSource, *, loopback_only: bool):
        self.source = source
        self.loopback_only = loopback_only
        self.subscribers: dict[asyncio.Queue[str | None], str] = {}  # queue -> run id or "follow"
        self.following: dict[asyncio.Queue[str | None], str | None] = {}
        self._ended = asyncio.Event()
        self._overview: dict[str, Any] | None = None

    # -- polling --------------------------------------------------------------------------------
    def _wanted(self, queue: asyncio.Queue[str | None]) -> str | None:
        wanted = self.subscribers.get(queue)
        return self.source.newest if wanted == "follow" else wanted

    def poll_once(self) -> None:
        """Fold what the source gained and send each browser what changed: each run's delta is
        made once, for every browser that watches it."""
        self.source.poll()
        overview = self.source.overview()
        fresh = overview != self._overview
        self._overview = overview
        watched = {self._wanted(q) for q in self.subscribers} & set(self.source.runs)
        deltas = {i: self.source.runs[i].delta() for i in watched}
        for queue in list(self.subscribers):
            run_id = self._wanted(queue)
            if fresh:
                self._send(queue, "overview", overview)
            if run_id is None or run_id not in self.source.runs:
                continue
            if self.following.get(queue) != run_id:  # a new run to follow: all of it
                self.following[queue] = run_id
                self._send(queue, "snapshot", {"run": run_id, **self.source.runs[run_id].snapshot()})
            elif deltas[run_id] is not None:
                self._send(queue, "delta", {"run": run_id, **deltas[run_id]})

    async def poll_forever(self) -> None:
        while not self._ended.is_set():
            self.poll_once()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ended.wait(), POLL_S)

    def end(self) -> None:
        """The run is over: a last poll, then every stream ends (the pages keep what they show)."""
        self.poll_once()
        for queue in list(self.subscribers):
            self._send(queue, "end", {"finished": self.source.finished})
            self._close(queue)
        self._ended.set()

    def _send(self, queue: asyncio.Queue[str | None], event: str, data: dict[str, Any]) -> None:
        try:
            queue.put_nowait(f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n")
        except asyncio.QueueFull:  # a browser that does not read: dropped, it reconnects afresh
            self._close(queue)

    def _close(self, queue: asyncio.Queue[str | None]) -> None:
        self.subscribers.pop(queue, None)
        self.following.pop(queue, None)
        with contextlib.suppress(asyncio.QueueFull):
            queue.put_nowait(None)

    # -- routes ---------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/", self.index)
        app.router.add_get("/static/{name}", self.asset)
        app.router.add_get("/api/overview", self.overview)
        app.router.add_get("/api/snapshot", self.snapshot)
        app.router.add_get("/api/stream", self.stream)
        app.router.add_get("/report.html", self.report)
        app.router.add_get("/plots/{name}", self.plot)
        app.router.add_get("/runs/{run}/report.html", self.run_report)
        app.router.add_get("/runs/{run}/plots/{name}", self.run_plot)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        # bound to loopback, only a page of this machine's own names may ask: a web page
        # elsewhere that names its host as 127.0.0.1 (DNS rebinding) reads nothing
        if self.loopback_only and request.url.host not in LOOPBACK_NAMES:
            raise web.HTTPForbidden(text="this live page answers to localhost only")
        response = await handler(request)
        for k, v in HEADERS.items():
            response.headers.setdefault(k, v)
        return response

    async def index(self, _request: web.Request) -> web.Response:
        return web.Response(body=(STATIC / "index.html").read_bytes(),
                            content_type="text/html", charset="utf-8")

    async def asset(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        kind = ASSETS.get(name)
        if kind is None:
            raise web.HTTPNotFound()
        path = STATIC / "uplot" / name if name.startswith("uPlot") else STATIC / name
        return web.Response(body=path.read_bytes(), content_type=kind, charset="utf-8")

    async def overview(self, _request: web.Request) -> web.Response:
        return web.json_response(self.source.overview(), dumps=_dumps)

    async def snapshot(self, request: web.Request) -> web.Response:
        run_id = request.query.get("run") or self.source.newest
        fold = self.source.runs.get(run_id or "")
        if fold is None:
            raise web.HTTPNotFound(text="no such run")
        return web.json_response({"run": run_id, **fold.snapshot()}, dumps=_dumps)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        wanted = request.query.get("run") or "follow"
        if wanted != "follow" and wanted not in self.source.runs:
            raise web.HTTPNotFound(text="no such run")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **HEADERS})
        await response.prepare(request)
        queue: asyncio.Queue[str | None] = asyncio.Queue(QUEUE_MAX)
        self.subscribers[queue] = wanted
        self._send(queue, "overview", self.source.overview())
        run_id = self.source.newest if wanted == "follow" else wanted
        if run_id in self.source.runs:
            self.following[queue] = run_id
            self._send(queue, "snapshot", {"run": run_id, **self.source.runs[run_id].snapshot()})
        if self._ended.is_set():
            self._send(queue, "end", {"finished": self.source.finished})
            self._close(queue)
        try:
            while True:
                try:
                    message = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                except asyncio.TimeoutError:
                    message = ": keep-alive\n\n"
                if message is None:
                    break
                await response.write(message.encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.subscribers.pop(queue, None)
            self.following.pop(queue, None)
        return response

    async def report(self, _request: web.Request) -> web.FileResponse:
        return _file(self.source.report())

    async def plot(self, request: web.Request) -> web.FileResponse:
        return _plot(self.source.report().parent, request.match_info["name"])

    def _run_dir(self, request: web.Request) -> Path:
        path = self.source.run_dir(request.match_info["run"])
        if path is None:
            raise web.HTTPNotFound()
        return path

    async def run_report(self, request: web.Request) -> web.FileResponse:
        return _file(self._run_dir(request) / "report.html")

    async def run_plot(self, request: web.Request) -> web.FileResponse:
        return _plot(self._run_dir(request), request.match_info["name"])


def _dumps(obj: Any) -> str:
    return json.dumps(obj, default=str)


def _file(path: Path) -> web.FileResponse:
    if not path.is_file():
        raise web.HTTPNotFound(text="not written yet")
    return web.FileResponse(path)


def _plot(run_dir: Path, name: str) -> web.FileResponse:
    if not PLOT.match(name):
        raise web.HTTPNotFound()
    return _file(run_dir / "plots" / name)


async def serve(page: LivePage, sock: socket.socket, *, ready_fd: int | None = None,
                stop: asyncio.Event | None = None) -> None:
    """Serve `page` on `sock` until SIGTERM or SIGINT, or `stop` is set (then `page.end()`: the
    pages get the last of it).

    page: the server; sock: `bind`'s socket; ready_fd: a pipe to close once SIGTERM is handled
    (`testbed.cli.web.LiveServer` waits for it before it sends one); stop: set to end it from
    this loop (a caller off the main thread, where signals cannot be handled)."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(page.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    if ready_fd is not None:
        os.close(ready_fd)
    poller = asyncio.create_task(page.poll_forever())
    try:
        await stop.wait()
    finally:
        page.end()
        await poller
        await asyncio.sleep(0.2)  # the streams write their last messages
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    """`python -m testbed.web.server --fd N (--run-dir DIR | --reproduce OUT)`: serve on the
    listening socket `testbed run --web` (or `reproduce --web`) bound and passed down."""
    parser = argparse.ArgumentParser(prog="python -m testbed.web.server", description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="a listening socket, inherited")
    parser.add_argument("--ready-fd", type=int, help="a pipe closed once the server runs")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--run-dir", type=Path, help="the run directory to serve")
    group.add_argument("--reproduce", type=Path, help="a reproduce's folder (<out>)")
    args = parser.parse_args(argv)
    sock = socket.socket(fileno=args.fd)
    source = RunSource(args.run_dir) if args.run_dir else ReproduceSource(args.reproduce)
    page = LivePage(source, loopback_only=is_loopback(sock.getsockname()[0]))
    try:
        asyncio.run(serve(page, sock, ready_fd=args.ready_fd))
    except TestbedError as exc:
        print(f"live page: {exc}", file=sys.stderr)
        return 1
    return 0


__all__ = ["LivePage", "bind", "is_loopback", "main", "parse_address", "serve", "url_of"]

if __name__ == "__main__":
    sys.exit(main())
