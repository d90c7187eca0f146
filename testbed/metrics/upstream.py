"""The balancer's side towards the replicas: keep-alive connections to each upstream, reused most
recent first, each an asyncio protocol that cuts its bytes into one response per request sent
(no stream reader, task or future per read: a few of those per request were most of the
balancer's own CPU, docs/pace.md)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from testbed.metrics.proxy import BadMessage, Head, MessageBuffer, body_length, encode_head


class Dropped(Exception):
    """The upstream connection closed or failed after the request was sent (a reset: 502)."""


class Refused(Exception):
    """No connection to the upstream could be opened: nothing was sent (try another)."""


class _Connection(asyncio.Protocol):
    """One connection to an upstream, answering one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer = MessageBuffer()
        self._method = ""
        self._answer: asyncio.Future[tuple[Head, bytes]] | None = None
        self.received = False  # any byte of the answer to the request in flight

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, request: bytes, method: str) -> asyncio.Future[tuple[Head, bytes]]:
        """Send one request; the future is its response's head and body (Dropped: the
        connection closed or failed before the whole response was in)."""
        assert self.transport is not None and self._answer is None
        self._answer = asyncio.get_running_loop().create_future()
        self._method, self.received = method, False
        self.transport.write(request)
        return self._answer

    def data_received(self, data: bytes) -> None:
        self.received = True
        self._buffer.feed(data)
        if self._answer is not None:
            self._try_answer(eof=False)

    def eof_received(self) -> bool:
        if self._answer is not None:
            self._try_answer(eof=True)
        self._fail("the upstream closed the connection before answering")
        return False  # closes the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(str(exc) if exc else "the upstream closed the connection before answering")

    def _try_answer(self, *, eof: bool) -> None:
        answer = self._answer
        assert answer is not None
        try:
            head = self._buffer.head()
            if head is None:
                return
            body = self._buffer.body(body_length(head, response_to=self._method), eof=eof)
        except (BadMessage, ValueError) as exc:
            self._fail(str(exc) or type(exc).__name__)
            self.close()
            return
        if body is not None:
            self._answer = None
            if not answer.done():
                answer.set_result((head, body))

    def _fail(self, why: str) -> None:
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            answer.set_exception(Dropped(why))

    @property
    def reusable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class UpstreamPool:
    """Keep-alive connections to each upstream (scheme://host:port), reused most recent first.
    `exchange` sends one request and reads its whole response."""

    def __init__(self, limit_idle: int = 64):
        self.limit_idle = limit_idle
        self._idle: dict[str, list[_Connection]] = {}
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
                    _, conn = await asyncio.get_running_loop().create_connection(
                        _Connection, host, port)
                except OSError as exc:
                    raise Refused(str(exc)) from exc
            try:
                head, data = await conn.send(request, method)
            except Dropped:
                conn.close()
                if reused and not conn.received:
                    continue  # the idle connection had gone: try a new one
                raise
            except BaseException:  # cancelled (a timeout): the connection is mid-exchange
                conn.close()
                raise
            if head.keep_alive and head.get("content-length") is not None:
                self._give(base, conn)
            else:
                conn.close()
            return head, data
        raise Dropped("no connection")  # not reached: the second pass opens one or raises

    def _take(self, base: str) -> _Connection | None:
        idle = self._idle.get(base)
        while idle:
            conn = idle.pop()
            if conn.reusable:
                return conn
            conn.close()
        return None

    def _give(self, base: str, conn: _Connection) -> None:
        idle = self._idle.setdefault(base, [])
        if len(idle) >= self.limit_idle:
            conn.close()
            return
        idle.append(conn)

    def close(self) -> None:
        """Close every idle connection (those in use close when their exchange ends)."""
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()

