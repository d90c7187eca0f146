"""The balancer's side towards the clients: each client connection an asyncio protocol that cuts
its bytes into requests and serves them in turn through a handler (one task per request, no
stream reader or future per read), closing it when idle, when asked, or on a bad message."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from testbed.metrics.proxy import BadMessage, Head, MessageBuffer, body_length, response

# what serves one request a connection sent: its head, body and the upload's seconds, and a
# callable that says whether the client is gone -> the response's bytes (None: send nothing)
Handler = Callable[[Head, bytes, float, Callable[[], bool]], Awaitable[bytes | None]]


class ClientConnection(asyncio.Protocol):
    """Serve the requests of one client connection in turn until it closes, is idle longer than
    `idle_timeout_s` (no whole head), or asks to close. `on_arrival` runs once a request's head
    is in (its latency counts from there); `on_lost` with what the client was doing when it went."""

    def __init__(self, handle: Handler, *, idle_timeout_s: float, on_arrival: Callable[[], None],
                 on_lost: Callable[[str], None], clock: Callable[[], float]):
        self._handle = handle
        self._idle_timeout_s = idle_timeout_s
        self._on_arrival = on_arrival
        self._on_lost = on_lost
        self._clock = clock
        self._buffer = MessageBuffer()
        self._transport: asyncio.Transport | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._length = 0  # the current request's body_length, once its head is in
        self._started = 0.0
        self._serving: asyncio.Task[None] | None = None
        self._eof = False
        self._gone = False
        self._can_write: asyncio.Future[None] | None = None  # set while the transport is full

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        self._buffer.feed(data)
        if self._serving is None:
            self._advance()

    def eof_received(self) -> bool:
        self._eof = True
        if self._serving is None:
            self._advance()
        return True  # half-closed: an answer in progress is still sent (or found unwanted)

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone = True
        self._cancel_idle()
        if self._serving is None and self._buffer.current is not None:
            self._on_lost("while sending the request")
        if self._can_write is not None and not self._can_write.done():
            self._can_write.set_result(None)

    def pause_writing(self) -> None:
        self._can_write = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._can_write is not None and not self._can_write.done():
            self._can_write.set_result(None)
        self._can_write = None

    def _client_gone(self) -> bool:
        # a client that closed its side (EOF) or reset the connection waits for nothing more
        return self._gone or self._eof or self._transport is None or self._transport.is_closing()

    def _advance(self) -> None:
        """Take the next whole request from the buffer and start serving it; close the
        connection on a bad message, or at the client's end of the stream between requests."""
        try:
            head = self._buffer.current
            if head is None:
                head = self._buffer.head()
                if head is None:
                    if self._eof:
                        if self._buffer.data.strip():
                            raise BadMessage("the connection closed inside a message's head")
                        self._close()
                    return
                self._cancel_idle()
                self._started = self._clock()
                self._on_arrival()
                self._length = body_length(head)
            body = self._buffer.body(self._length)
        except BadMessage as exc:
            self._refuse(exc)
            return
        if body is None:
            if self._eof:  # the body will not come
                self._buffer.current = None  # counted here, not again as the connection goes
                self._on_lost("while sending the request")
                self._close()
            return
        upload_s = self._clock() - self._started
        self._serving = asyncio.get_running_loop().create_task(self._serve(head, body, upload_s))

    async def _serve(self, head: Head, body: bytes, upload_s: float) -> None:
        try:
            data = await self._handle(head, body, upload_s, self._client_gone)
        except BaseException:
            self._close()
            raise
        self._serving = None
        if data is None or self._gone:
            self._close()
            return
        assert self._transport is not None
        self._transport.write(data)
        if not head.keep_alive:
            self._close()
            return
        if self._can_write is not None:
            await self._can_write
        if not self._gone:
            self._arm_idle()
            self._advance()

    def _refuse(self, exc: BadMessage) -> None:
        if self._transport is not None and not self._gone:
            self._transport.write(response(exc.status, [("Content-Type", "text/plain")],
                                           str(exc).encode(), close=True))
        self._close()

    def _arm_idle(self) -> None:
        self._cancel_idle()
        self._idle = asyncio.get_running_loop().call_later(self._idle_timeout_s, self._close)

    def _cancel_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def close(self) -> None:
        """Close the connection now (an answer in progress is not sent)."""
        self._close()

    def _close(self) -> None:
        self._cancel_idle()
        if self._transport is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                self._transport.close()
