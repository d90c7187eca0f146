"""A lean HTTP/1.1 client for the load generator: keep-alive connections on asyncio protocols, each
request written from the caller's own call (no task, no coroutine per request) and each answer
delivered by callback, so one process can send thousands of requests a second on time."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from urllib.parse import urlsplit

from testbed.metrics.meter import SERVER_MS_HEADER

# on_done(status, body, error, sent_mono, server_ms): status 0 and body b"" when there was no
# response; server_ms is the answer's X-Testbed-Server-Ms header (an emulated replica's time, wall
# ms, from admission to its answer), None without one.
DoneCallback = Callable[[int, bytes, "BaseException | None", float, "float | None"], None]
_SERVER_MS = SERVER_MS_HEADER.lower().encode()

_MAX_HEAD = 64 * 1024


class ProtocolViolation(Exception):
    """What the server sent is not an HTTP/1.1 response."""


class ConnectionDropped(ConnectionResetError):
    """The server closed the connection before the response was complete."""


class RequestTimeout(TimeoutError):
    """No complete response within the request's timeout."""


class RequestCancelled(Exception):
    """The client was shut down while the request was outstanding."""


class Exchange:
    """One request on its way: the bytes to write, its callback, its timer and its connection."""

    __slots__ = ("conn", "data", "done", "on_done", "sent", "timer")

    def __init__(self, data: bytes, on_done: DoneCallback):
        self.data = data
        self.on_done = on_done
        self.sent = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.conn: _Connection | None = None
        self.done = False

    def finish(self, status: int, body: bytes, error: BaseException | None,
               server_ms: float | None = None) -> None:
        """End the exchange once: the answer's `status`, `body` and `server_ms` (the replica's own
        time from its X-Testbed-Server-Ms header, None without one), or the `error` (status 0),
        to its callback."""
        if self.done:
            return
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
        self.on_done(status, body, error, self.sent, server_ms)


def encode_request(method: str, target: str, host: str, headers: dict[str, str], body: bytes) -> bytes:
    """The request's bytes on the wire: request line, Host, the given headers, Content-Length.

    method, target: the request line's; host: the Host header; headers: the others; body: the
    payload."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Connection(asyncio.Protocol):
    """One keep-alive connection carrying one exchange at a time; parses the response as it
    arrives (Content-Length, chunked, or until close)."""

    def __init__(self, pool: ConnectionPool):
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.closed = False
        self._reset_parser()

    def _reset_parser(self) -> None:
        self._buf = bytearray()
        self._status = 0
        self._length: int | None = None  # body bytes expected; None: chunked or until close
        self._chunked = False
        self._chunk_left = -1  # bytes left in the current chunk; -1: expecting a size line
        self._body = bytearray()
        self._keep_alive = True
        self._in_body = False
        self._server_ms: float | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, ex: Exchange) -> None:
        assert self.transport is not None
        self.exchange = ex
        ex.conn = self
        self._reset_parser()
        ex.sent = self.pool.loop.time()
        self.transport.write(ex.data)

    def data_received(self, data: bytes) -> None:
        if self.exchange is None:
            self.abort()  # bytes nobody asked for: the connection cannot be trusted any more
            return
        self._buf += data
        try:
            done = self._parse()
        except ProtocolViolation as exc:
            self._fail(exc)
            return
        if done:
            ex, status, body = self.exchange, self._status, bytes(self._body)
            self.exchange = None
            if self._keep_alive and not self._buf and self.pool.keep_alive:
                self.pool._release(self)
            elif not self._buf:
                self.close()  # answered in full: an orderly close, as the server does
            else:
                self.abort()
            ex.finish(status, body, None, self._server_ms)

    def _parse(self) -> bool:
        """Consume what is buffered; True once the whole response is in."""
        if not self._in_body:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > _MAX_HEAD:
                    raise ProtocolViolation("response head too long")
                return False
            self._parse_head(bytes(self._buf[:end]))
            del self._buf[: end + 4]
            self._in_body = True
            if self._length == 0:
                return True
        if self._chunked:
            return self._parse_chunks()
        if self._length is None:
            self._body += self._buf  # delimited by the server closing the connection
            self._buf.clear()
            return False
        need = self._length - len(self._body)
        self._body += self._buf[:need]
        del self._buf[:need]
        return len(self._body) >= self._length

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ProtocolViolation(f"bad status line {lines[0][:80]!r}")
        self._status = int(parts[1])
        self._keep_alive = parts[0] == b"HTTP/1.1"
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise ProtocolViolation(f"bad header line {line[:80]!r}")
            name = name.strip().lower()
            value = value.strip().lower()
            if name == b"content-length":
                if not value.isdigit():
                    raise ProtocolViolation(f"bad Content-Length {value[:40]!r}")
                self._length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value:
                self._chunked = True
            elif name == _SERVER_MS:
                try:
                    self._server_ms = float(value)
                except ValueError:
                    raise ProtocolViolation(f"bad {SERVER_MS_HEADER} {value[:40]!r}") from None
            elif name == b"connection":
                self._keep_alive = value == b"keep-alive" or (self._keep_alive and value != b"close")
        if self._chunked:
            self._length = None
        elif self._status in (204, 304) or 100 <= self._status < 200:
            self._length = 0
        elif self._length is None:
            self._keep_alive = False

    def _parse_chunks(self) -> bool:
        buf = self._buf
        while True:
            if self._chunk_left == -1:
                eol = buf.find(b"\r\n")
                if eol < 0:
                    return False
                size = bytes(buf[:eol]).split(b";", 1)[0].strip()
                try:
                    self._chunk_left = int(size, 16)
                except ValueError:
                    raise ProtocolViolation(f"bad chunk size {size[:20]!r}") from None
                del buf[: eol + 2]
                if self._chunk_left == 0:
                    self._chunk_left = -2  # trailers until an empty line
            if self._chunk_left == -2:
                eol = buf.find(b"\r\n")
                if eol < 0:
                    return False
                del buf[: eol + 2]
                if eol == 0:
                    return True
                continue
            if len(buf) < self._chunk_left + 2:
                take = min(len(buf), self._chunk_left)
                self._body += buf[:take]
                del buf[:take]
                self._chunk_left -= take
                return False
            self._body += buf[: self._chunk_left]
            del buf[: self._chunk_left + 2]
            self._chunk_left = -1

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        ex = self.exchange
        if ex is None:
            return
        self.exchange = None
        if exc is None and self._in_body and self._length is None and not self._chunked:
            ex.finish(self._status, bytes(self._body), None,
                      self._server_ms)  # body ended by the close, as announced
        else:
            ex.finish(self._status, b"", exc if isinstance(exc, ConnectionResetError)
                      else ConnectionDropped("server closed the connection before answering"))

    def _fail(self, error: BaseException) -> None:
        ex = self.exchange
        self.exchange = None
        self.abort()
        if ex is not None:
            ex.finish(self._status, b"", error)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class ConnectionPool:
    """Keep-alive connections to one host:port, at most `limit` open; a request goes out on an idle
    connection at once, else on a new one, else waits for the next connection to free up. Without
    `keep_alive` every request opens its own connection and asks the server to close it
    (`Connection: close`), as a client without a session does."""

    def __init__(self, url: str, *, limit: int = 256, timeout_s: float = 4.0,
                 local_addr: str | None = None, keep_alive: bool = True):
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{url!r}: the load client speaks plain http://host:port only")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.host_header = parts.netloc
        self.prefix = parts.path.rstrip("/")
        self.limit = limit
        self.timeout_s = timeout_s
        self.local_addr = (local_addr, 0) if local_addr else None
        self.keep_alive = keep_alive
        self.loop = asyncio.get_running_loop()
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self._connecting: set[asyncio.Task[None]] = set()
        self._waiting: deque[Exchange] = deque()
        self._closed = False
        self.waited = 0  # requests that found every allowed connection busy or opening: queued
        self.peak_connections = 0

    @property
    def open_connections(self) -> int:
        """The connections open now, idle or busy."""
        return len(self._all)

    def request(self, method: str, target: str, headers: dict[str, str], body: bytes,
                on_done: DoneCallback) -> Exchange:
        """Send now if a connection is free; `on_done` runs exactly once, with the answer or error.

        method, target, headers, body: the request; on_done: its callback (status, body, error, sent
        time)."""
        if not self.keep_alive:
            headers = {**headers, "Connection": "close"}
        data = encode_request(method, self.prefix + target, self.host_header, headers, body)
        ex = Exchange(data, on_done)
        ex.timer = self.loop.call_later(self.timeout_s, self._timed_out, ex)
        if self._closed:
            ex.finish(0, b"", RequestCancelled("client closed"))
            return ex
        while self._idle and self.keep_alive:
            conn = self._idle.pop()  # the most recently used: its socket is warm
            if not conn.closed:
                conn.send(ex)
                return ex
        # No idle connection: the request waits for whichever frees up first, an answered one or
        # a new one (when under the limit) -- never bound to one connection attempt.
        self._waiting.append(ex)
        if len(self._all) + len(self._connecting) < self.limit:
            self._open()
        else:
            self.waited += 1
        return ex

    def _open(self) -> None:
        task = self.loop.create_task(self._connect())
        self._connecting.add(task)
        task.add_done_callback(self._connected)

    async def _connect(self) -> None:
        _transport, conn = await self.loop.create_connection(
            lambda: _Connection(self), self.host, self.port, local_addr=self.local_addr)
        if self._closed:
            conn.abort()
            return
        self._all.add(conn)
        self.peak_connections = max(self.peak_connections, len(self._all))
        self._release(conn)

    def _connected(self, task: asyncio.Task[None]) -> None:
        self._connecting.discard(task)
        if task.cancelled() or (exc := task.exception()) is None:
            return
        # This attempt failed: the oldest waiting request gets the error (with an unreachable
        # server every request fails once); none waiting means nobody needed the connection.
        while self._waiting:
            ex = self._waiting.popleft()
            if not ex.done:
                ex.finish(0, b"", exc)
                break
        if self._waiting and not self._closed and len(self._all) + len(self._connecting) < self.limit:
            self._open()  # requests queued behind the limit get their own attempt

    def _release(self, conn: _Connection) -> None:
        if self._closed or conn.closed:
            conn.abort()
            return
        while self._waiting:
            ex = self._waiting.popleft()
            if not ex.done:
                conn.send(ex)
                return
        self._idle.append(conn)

    def _forget(self, conn: _Connection) -> None:
        self._all.discard(conn)
        if self._waiting and not self._closed and len(self._all) + len(self._connecting) < self.limit:
            self._open()  # a slot opened up while requests wait

    def _timed_out(self, ex: Exchange) -> None:
        ex.timer = None
        conn = ex.conn
        if conn is not None and conn.exchange is ex:
            conn.exchange = None
            conn.abort()  # the late answer would arrive on it: the connection is spent
        ex.finish(0, b"", RequestTimeout(f"no response within {self.timeout_s} s"))

    def close(self) -> None:
        """Abort every connection; outstanding requests finish with RequestCancelled. Idempotent."""
        self._closed = True
        cancelled = RequestCancelled("client closed")
        for task in list(self._connecting):
            task.cancel()
        while self._waiting:
            self._waiting.popleft().finish(0, b"", cancelled)
        for conn in list(self._all):
            ex = conn.exchange
            conn.exchange = None
            conn.abort()
            if ex is not None:
                ex.finish(0, b"", cancelled)
        self._idle.clear()
