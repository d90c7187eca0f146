"""HTTP/1.1 at the level a proxy needs: a message's head read and parsed, its body read whole by
its length (or its chunks), and keep-alive connections to each upstream kept for reuse. The local
balancer forwards through this instead of an HTTP framework's client and server, whose request
objects cost it about half a millisecond of CPU a request (docs/pace.md)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024  # a head larger than this is refused (431)
MAX_BODY = 64 * 1024 * 1024  # the balancer's largest body, as its aiohttp server allowed
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Payload Too Large",
           431: "Request Header Fields Too Large", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


class BadMessage(ValueError):
    """A head or body that does not parse; `status` is what the client is answered."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class Head:
    """A request's or response's first line and headers (names as sent; `get` is case-blind)."""

    line: tuple[str, str, str]  # (method, target, version) or (version, status, reason)
    headers: list[tuple[str, str]]

    def get(self, name: str, default: str | None = None) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return default

    @property
    def keep_alive(self) -> bool:
        """Whether the connection stays open after this message (HTTP/1.1 unless `close`)."""
        conn = (self.get("connection") or "").lower()
        version = self.line[0] if self.line[0].startswith("HTTP/") else self.line[2]
        return "close" not in conn if version != "HTTP/1.0" else "keep-alive" in conn


async def read_head(reader: asyncio.StreamReader) -> Head | None:
    """The next message's head; None at a clean end of the stream (nothing more was sent)."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise BadMessage("the connection closed inside a message's head") from None
    except asyncio.LimitOverrunError:
        raise BadMessage("the head is too large", 431) from None
    lines = raw[:-4].decode("latin-1").split("\r\n")
    first = lines[0].split(" ", 2)
    if len(first) != 3:
        raise BadMessage(f"not an HTTP message line: {lines[0][:60]!r}")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadMessage(f"not a header line: {line[:60]!r}")
        headers.append((name, value.strip()))
    return Head((first[0], first[1], first[2]), headers)


async def read_body(reader: asyncio.StreamReader, head: Head, *, response_to: str = "") -> bytes:
    """The message's body: Content-Length bytes, or its chunks joined; none for a request that
    states neither (and for a response to HEAD or a 1xx/204/304); to its end for a response that
    states neither. `response_to`: the request's method when `head` is a response's."""
    if response_to:
        status = int(head.line[1])
        if response_to == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return b""
    if "chunked" in (head.get("transfer-encoding") or "").lower():
        return await _read_chunks(reader)
    length = head.get("content-length")
    if length is None:
        return await reader.read() if response_to else b""
    try:
        n = int(length)
    except ValueError:
        raise BadMessage(f"Content-Length {length[:20]!r} is not a number") from None
    if not 0 <= n <= MAX_BODY:
        raise BadMessage(f"a body of {n} bytes", 413)
    return await reader.readexactly(n)


async def _read_chunks(reader: asyncio.StreamReader) -> bytes:
    parts, total = [], 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadMessage("a chunk size is not hexadecimal") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, left out
                pass
            return b"".join(parts)
        total += size
        if total > MAX_BODY:
            raise BadMessage(f"a body of more than {MAX_BODY} bytes", 413)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)  # the chunk's CRLF


def encode_head(line: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    """A message's head for `body` (its Content-Length set; hop-by-hop headers are the caller's
    to leave out)."""
    out = [line]
    out += [f"{k}: {v}" for k, v in headers]
    out.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")


def response(status: int, headers: list[tuple[str, str]], body: bytes, *, close: bool = False) -> bytes:
    """A whole HTTP/1.1 response."""
    extra = [("Connection", "close")] if close else []
    return encode_head(f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}", [*headers, *extra],
                       body) + body


class Dropped(Exception):
    """The upstream connection closed or failed after the request was sent (a reset: 502)."""


class Refused(Exception):
    """No connection to the upstream could be opened: nothing was sent (try another)."""


class UpstreamPool:
    """Keep-alive connections to each upstream (scheme://host:port), reused most recent first.
    `exchange` sends one request and reads its whole response."""

    def __init__(self, limit_idle: int = 64):
        self.limit_idle = limit_idle
        self._idle: dict[str, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self._addresses: dict[str, tuple[str, int, str]] = {}

    async def exchange(self, base: str, method: str, target: str, headers: list[tuple[str, str]],
                       body: bytes, timeout_s: float | None = None) -> tuple[Head, bytes]:
        """Send the request to upstream `base` and return its response's head and body, within
        `timeout_s` (TimeoutError past it). Raises Refused when no connection could be opened,
        Dropped when one closed or failed after the request went out. A reused connection the
        upstream closed while idle is retried once on a new one (nothing reached the upstream)."""
        host, port, path = self._address(base)
        request = encode_head(f"{method} {path}{target} HTTP/1.1",
                              [("Host", f"{host}:{port}"), *headers], body) + body
        exchange = self._exchange(base, host, port, method, request)
        task = asyncio.current_task()
        if timeout_s is None:
            return await exchange
        if task is None or not hasattr(task, "uncancel"):  # Python 3.10
            return await asyncio.wait_for(exchange, timeout_s)
        # a timer that cancels this task, not asyncio.wait_for's task per request
        fired = False

        def expire() -> None:
            nonlocal fired
            fired = True
            task.cancel()

        timer = asyncio.get_running_loop().call_later(timeout_s, expire)
        try:
            return await exchange
        except asyncio.CancelledError:
            if not fired:  # cancelled from outside: as it is
                raise
            task.uncancel()
            raise TimeoutError(f"no answer from {base} in {timeout_s:g} s") from None
        finally:
            timer.cancel()

    def _address(self, base: str) -> tuple[str, int, str]:
        cached = self._addresses.get(base)
        if cached is None:
            parts = urlsplit(base)
            cached = self._addresses[base] = (parts.hostname or "127.0.0.1", parts.port or 80,
                                              parts.path.rstrip("/"))
        return cached

    async def _exchange(self, base: str, host: str, port: int, method: str,
                        request: bytes) -> tuple[Head, bytes]:
        for reused in (True, False):
            conn = self._take(base) if reused else None
            if conn is None:
                if reused:
                    continue
                try:
                    conn = await asyncio.open_connection(host, port)
                except OSError as exc:
                    raise Refused(str(exc)) from exc
            reader, writer = conn
            try:
                writer.write(request)
                head = await read_head(reader)
                if head is None:
                    raise Dropped("the upstream closed the connection before answering")
                data = await read_body(reader, head, response_to=method)
            except (Dropped, OSError, asyncio.IncompleteReadError, BadMessage) as exc:
                writer.close()
                if reused and isinstance(exc, Dropped | ConnectionResetError | BrokenPipeError):
                    continue  # the idle connection had gone: try a new one
                raise Dropped(str(exc) or type(exc).__name__) from exc
            except BaseException:  # cancelled (a timeout): the connection is mid-exchange
                writer.close()
                raise
            if head.keep_alive and head.get("content-length") is not None:
                self._give(base, conn)
            else:
                writer.close()
            return head, data
        raise Dropped("no connection")  # not reached: the second pass opens one or raises

    def _take(self, base: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        idle = self._idle.get(base)
        while idle:
            reader, writer = idle.pop()
            if not writer.is_closing() and not reader.at_eof():
                return reader, writer
            writer.close()
        return None

    def _give(self, base: str, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        idle = self._idle.setdefault(base, [])
        if len(idle) >= self.limit_idle:
            conn[1].close()
            return
        idle.append(conn)

    def close(self) -> None:
        """Close every idle connection (those in use close when their exchange ends)."""
        for idle in self._idle.values():
            for _, writer in idle:
                writer.close()
        self._idle.clear()


# what serves one request a connection sent: its head, body and the upload's seconds, and a
# callable that says whether the client is gone -> the response's bytes (None: send nothing)
Handler = Callable[[Head, bytes, float, Callable[[], bool]], Awaitable[bytes | None]]


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           handle: Handler, *, idle_timeout_s: float,
                           on_arrival: Callable[[], None], on_lost: Callable[[str], None],
                           clock: Callable[[], float]) -> None:
    """Serve the requests of one client connection in turn until it closes, is idle longer than
    `idle_timeout_s`, or asks to close. `on_arrival` runs once a request's head is in (its
    latency counts from there); `on_lost` with what the client was doing when it went."""
    try:
        while True:
            try:
                head = await asyncio.wait_for(read_head(reader), idle_timeout_s)
            except (TimeoutError, asyncio.TimeoutError, ConnectionError):
                return
            except BadMessage as exc:
                writer.write(response(exc.status, [("Content-Type", "text/plain")],
                                      str(exc).encode(), close=True))
                return
            if head is None:
                return
            started = clock()
            on_arrival()
            try:
                body = await read_body(reader, head)
            except BadMessage as exc:
                writer.write(response(exc.status, [("Content-Type", "text/plain")],
                                      str(exc).encode(), close=True))
                return
            except (asyncio.IncompleteReadError, ConnectionError):
                on_lost("while sending the request")
                return
            upload_s = clock() - started
            # a client that closed its side (EOF) or reset the connection waits for nothing more
            data = await handle(head, body, upload_s,
                                lambda: writer.is_closing() or reader.at_eof())
            if data is None:
                return
            writer.write(data)
            if not head.keep_alive:
                return
            with contextlib.suppress(ConnectionError):
                await writer.drain()
    finally:
        writer.close()
