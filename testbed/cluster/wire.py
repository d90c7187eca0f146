"""The replica's own HTTP/1.1 server, for handlers that read only a request's method, path, query,
headers and body (`plain_request = True`: the built-in ones): the balancer's connection protocol
(testbed.metrics.downstream) in front of the replica's routes. It takes about half the CPU per
request of aiohttp's server, which builds a request object, a payload stream and a task per
request around the same bytes (docs/pace.md). Other handlers keep aiohttp's server."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, unquote

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict, MultiDictProxy

from testbed.metrics.downstream import ClientConnection
from testbed.metrics.proxy import Head, encode_head

log = logging.getLogger(__name__)

Route = Callable[[Any], Awaitable[web.StreamResponse]]
# a response's headers that the server sets itself (the framing is its own)
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})


class PlainRequest:
    """One whole request as a handler reads it: the part of aiohttp's `web.Request` that a plain
    handler may use (`method`, `path`, `query`, `headers`, `content_type`, `read()`, `text()`,
    `json()`)."""

    def __init__(self, head: Head, body: bytes):
        self.method = head.line[0]
        self._target = head.line[1]
        self._head = head
        self._body = body
        self._headers: CIMultiDictProxy[str] | None = None

    @property
    def path(self) -> str:
        return unquote(self._target.partition("?")[0])

    @property
    def query(self) -> MultiDictProxy[str]:
        return MultiDictProxy(MultiDict(parse_qsl(self._target.partition("?")[2],
                                                  keep_blank_values=True)))

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        if self._headers is None:
            self._headers = CIMultiDictProxy(CIMultiDict(self._head.headers))
        return self._headers

    @property
    def content_type(self) -> str:
        return (self._head.get("content-type") or "application/octet-stream").partition(";")[0] \
            .strip().lower()

    async def read(self) -> bytes:
        return self._body

    async def text(self) -> str:
        return self._body.decode("utf-8")

    async def json(self) -> Any:
        return json.loads(self._body)


def encode(resp: web.StreamResponse, keep_alive: bool) -> bytes:
    """An aiohttp response built by a route (a `web.Response` with a bytes body) as the bytes sent."""
    body = resp.body if isinstance(resp, web.Response) else None
    if not isinstance(body, bytes):
        body = bytes(body) if isinstance(body, bytearray | memoryview) else b""
    headers = [(k, v) for k, v in resp.headers.items() if k.lower() not in _FRAMING]
    if not keep_alive:
        headers.append(("Connection", "close"))
    return encode_head(f"HTTP/1.1 {resp.status} {resp.reason}", headers, body) + body


class PlainServer:
    """Serve `routes` ((method, path) -> coroutine of a PlainRequest) on host:port: 404 for an
    unknown path, 405 for a known path with another method, 500 (logged) when a route raises."""

    def __init__(self, routes: dict[tuple[str, str], Route], *, idle_timeout_s: float):
        self.routes = routes
        self.paths = {path for _, path in routes}
        self.idle_timeout_s = idle_timeout_s
        self._server: asyncio.Server | None = None
        self._connections: set[ClientConnection] = set()

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the port bound (`port` 0: any free one)."""
        self._server = await asyncio.get_running_loop().create_server(
            self._connection, host, port, backlog=1024)
        return self._server.sockets[0].getsockname()[1]

    def _connection(self) -> ClientConnection:
        return _TrackedConnection(self._connections, self._handle, idle_timeout_s=self.idle_timeout_s,
                                  on_arrival=_nothing, on_lost=_ignore, clock=time.monotonic)

    async def _handle(self, head: Head, body: bytes, _upload_s: float,
                      _client_gone: Callable[[], bool]) -> bytes:
        method, path = head.line[0], unquote(head.line[1].partition("?")[0])
        route = self.routes.get((method, path))
        if route is None:
            status = 405 if path in self.paths else 404
            resp: web.StreamResponse = web.Response(status=status, text=f"{status}: {path}")
        else:
            try:
                resp = await route(PlainRequest(head, body))
            except web.HTTPException as exc:
                resp = exc
            except Exception:
                log.exception("route %s %s failed", method, path)
                resp = web.Response(status=500, text="500 Internal Server Error")
        return encode(resp, head.keep_alive)

    async def close(self) -> None:
        """Stop listening and close every connection (answers in progress are dropped: drain
        the replica first)."""
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.close()
        self._connections.clear()


class _TrackedConnection(ClientConnection):
    """A client connection kept in its server's set while it is open."""

    def __init__(self, open_: set[ClientConnection], *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._open = open_

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._open.add(self)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._open.discard(self)
        super().connection_lost(exc)


def _nothing() -> None:
    pass


def _ignore(_when: str) -> None:
    pass  # a client gone mid-request: the replica's answer is simply not sent
