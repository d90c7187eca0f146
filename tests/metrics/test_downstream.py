"""The balancer's client side (testbed.metrics.downstream) over a real socket, with a handler that
echoes what it was given: requests cut from the bytes as they arrive, in turn, and the answers a
client gets for what is not a request."""

from __future__ import annotations

import asyncio
import time

from testbed.metrics.downstream import ClientConnection
from testbed.metrics.proxy import MAX_HEAD, Head, response


async def _echo(head: Head, body: bytes, upload_s: float, gone) -> bytes:
    await asyncio.sleep(0.001)
    return response(200, [("X-Target", head.line[1])], body, close=not head.keep_alive)


async def _exchange(raw: bytes, *, idle_timeout_s: float = 5.0, wait_s: float = 1.0):
    """Send `raw` on one connection; return what came back before the server closed it (or
    `wait_s` passed), the arrivals counted and the lost connections reported."""
    arrivals, lost = [], []

    def connection() -> ClientConnection:
        return ClientConnection(_echo, idle_timeout_s=idle_timeout_s,
                                on_arrival=lambda: arrivals.append(1), on_lost=lost.append,
                                clock=time.monotonic)

    server = await asyncio.get_running_loop().create_server(connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(raw)
        await writer.drain()
        got = b""
        try:
            while chunk := await asyncio.wait_for(reader.read(65536), wait_s):
                got += chunk
        except (TimeoutError, asyncio.TimeoutError):
            pass
        writer.close()
        return got, len(arrivals), lost
    finally:
        server.close()


def test_pipelined_requests_are_answered_in_turn_and_a_chunked_body_is_joined():
    raw = (b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
           b"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"2\r\nde\r\n1;ext=1\r\nf\r\n0\r\nTrailer: t\r\n\r\n"
           b"GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got, arrivals, lost = asyncio.run(_exchange(raw))
    answers = got.split(b"HTTP/1.1 200 OK")[1:]
    assert [a.split(b"X-Target: ")[1].split(b"\r\n")[0] for a in answers] == [b"/a", b"/b", b"/c"]
    assert answers[0].endswith(b"\r\n\r\nabc") and answers[1].endswith(b"\r\n\r\ndef")
    assert arrivals == 3 and lost == []


def test_a_bad_head_is_400_an_oversized_one_431_and_a_huge_body_413():
    got, _, _ = asyncio.run(_exchange(b"NOT-HTTP\r\n\r\n"))
    assert got.startswith(b"HTTP/1.1 400 ") and b"Connection: close" in got
    got, _, _ = asyncio.run(_exchange(b"GET / HTTP/1.1\r\nX: " + b"y" * (MAX_HEAD + 10)))
    assert got.startswith(b"HTTP/1.1 431 ")
    got, _, _ = asyncio.run(_exchange(b"POST / HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n"))
    assert got.startswith(b"HTTP/1.1 413 ")


def test_a_body_cut_short_is_one_lost_connection_and_an_idle_one_is_closed():
    # the client closes while its body is still due (after waiting 0.3 s for an answer): once
    got, arrivals, lost = asyncio.run(_exchange(
        b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", wait_s=0.3))
    assert got == b"" and arrivals == 1 and lost == ["while sending the request"]

    async def half_close():
        arrivals, lost = [], []
        server = await asyncio.get_running_loop().create_server(
            lambda: ClientConnection(_echo, idle_timeout_s=5, on_arrival=lambda: arrivals.append(1),
                                     on_lost=lost.append, clock=time.monotonic), "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        writer.write(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 2) == b""  # closed, nothing answered
        server.close()
        return lost

    assert asyncio.run(half_close()) == ["while sending the request"]  # once, not again at close
    started = time.monotonic()
    got, arrivals, _ = asyncio.run(_exchange(b"", idle_timeout_s=0.2, wait_s=3))
    assert got == b"" and arrivals == 0 and time.monotonic() - started < 2  # closed when idle
