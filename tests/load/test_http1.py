"""The lean HTTP/1.1 pool against raw asyncio servers that answer with hand-written bytes: every
framing the services may use parses, bad bytes and dropped connections map to errors, connections
are reused only when that is safe, and the connection limit queues instead of failing."""

import asyncio

import pytest

from testbed.load.client import classify_error
from testbed.load.http1 import ConnectionPool, ProtocolViolation, encode_request

OK_LEN = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello"
OK_CHUNKED = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"3\r\nhel\r\n2;ext=1\r\nlo\r\n0\r\nX-Trailer: t\r\n\r\n")
OK_CLOSE = b"HTTP/1.0 200 OK\r\n\r\nuntil-close"


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request (head + Content-Length body), or None at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


class RawServer:
    """Answers every request on a connection with `reply(request) -> bytes | None` (None: hang up);
    `split` sends the answer in small pieces to exercise incremental parsing."""

    def __init__(self, reply, split: int = 0, close_after: bool = False, delay_s: float = 0.0):
        self.reply, self.split, self.close_after, self.delay_s = reply, split, close_after, delay_s
        self.connections = 0
        self.requests: list[bytes] = []

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _handle(self, reader, writer):
        self.connections += 1
        try:
            while (req := await read_request(reader)) is not None:
                self.requests.append(req)
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                data = self.reply(req)
                if data is None:
                    break
                step = self.split or len(data)
                for i in range(0, len(data), step):
                    writer.write(data[i:i + step])
                    await writer.drain()
                    if self.split:
                        await asyncio.sleep(0.001)
                if self.close_after:
                    break
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client hung up, or the test is over
        finally:
            writer.close()


async def fetch(pool: ConnectionPool, n: int = 1, target: str = "/x", body: bytes = b"hi"):
    loop = asyncio.get_running_loop()
    futs = []
    for _ in range(n):
        fut = loop.create_future()
        pool.request("POST", target, {"Content-Type": "text/plain"}, body,
                     lambda s, b, e, sent, ms, f=fut: f.set_result((s, b, e, sent)))
        futs.append(fut)
    return await asyncio.gather(*futs)


def run(coro):
    return asyncio.run(coro)


def test_request_bytes():
    data = encode_request("POST", "/api/generate", "h:1", {"Content-Type": "application/json"}, b"{}")
    assert data == (b"POST /api/generate HTTP/1.1\r\nHost: h:1\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 2\r\n\r\n{}")
    assert b"Content-Length" not in encode_request("GET", "/api/tts?text=a", "h", {}, b"")


@pytest.mark.parametrize("answer,split", [(OK_LEN, 0), (OK_LEN, 3), (OK_CHUNKED, 0), (OK_CHUNKED, 4)])
def test_framings_parse_and_keep_alive(answer, split):
    async def main():
        async with RawServer(lambda req: answer, split=split) as srv:
            pool = ConnectionPool(srv.url + "/base")
            first = await fetch(pool)
            second = await fetch(pool)
            pool.close()
            return first + second, srv

    results, srv = run(main())
    assert [(s, b, e) for s, b, e, _ in results] == [(200, b"hello", None)] * 2
    assert srv.connections == 1, "a complete keep-alive response leaves the connection reusable"
    assert srv.requests[0].startswith(b"POST /base/x HTTP/1.1\r\n")
    assert srv.requests[0].endswith(b"\r\n\r\nhi")


def test_body_until_close_and_connection_close_are_not_reused():
    async def main():
        async with RawServer(lambda req: OK_CLOSE, close_after=True) as srv:
            pool = ConnectionPool(srv.url)
            a = await fetch(pool)
            b = await fetch(pool)
            pool.close()
            return a + b, srv

    results, srv = run(main())
    assert [(s, b, e) for s, b, e, _ in results] == [(200, b"until-close", None)] * 2
    assert srv.connections == 2


def test_without_keep_alive_every_request_opens_and_closes_its_own_connection():
    """As the dissertation's client (`Connection: close`): a server that would keep the
    connection gets a new one for every request, and the client closes each once answered."""
    async def main():
        async with RawServer(lambda req: OK_LEN) as srv:
            pool = ConnectionPool(srv.url, keep_alive=False)
            results = [await fetch(pool) for _ in range(3)]
            await asyncio.sleep(0.05)  # the closes reach the server
            open_after = pool.open_connections
            pool.close()
            return results, srv, open_after

    results, srv, open_after = run(main())
    assert [r[0][:3] for r in results] == [(200, b"hello", None)] * 3
    assert srv.connections == 3 and open_after == 0
    assert all(b"\r\nConnection: close\r\n" in req for req in srv.requests)


@pytest.mark.parametrize("reply,kind", [
    (lambda req: b"HTTX/1.1 200 OK\r\n\r\n", "malformed"),
    (lambda req: b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n", "malformed"),
    (lambda req: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed"),
    (lambda req: None, "reset"),  # hang up without a byte
    (lambda req: b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", "reset"),
])
def test_bad_answers_are_classified(reply, kind):
    async def main():
        async with RawServer(reply, close_after=True) as srv:
            pool = ConnectionPool(srv.url)
            res = await fetch(pool)
            pool.close()
            return res

    (_status, body, exc, _sent), = run(main())
    assert exc is not None and body == b""
    assert classify_error(exc) == kind, exc


def test_timeout_spends_the_connection():
    async def main():
        async with RawServer(lambda req: OK_LEN, delay_s=0.3) as srv:
            pool = ConnectionPool(srv.url, timeout_s=0.1)
            (_, _, exc, _), = await fetch(pool)
            pool.timeout_s = 2.0
            (s2, b2, exc2, _), = await fetch(pool)
            pool.close()
            return exc, (s2, b2, exc2), srv.connections

    exc, second, connections = run(main())
    assert classify_error(exc) == "timeout"
    assert second == (200, b"hello", None)
    assert connections == 2, "the timed-out connection must not carry the next request"


def test_connection_limit_queues_and_close_cancels():
    async def main():
        async with RawServer(lambda req: OK_LEN, delay_s=0.05) as srv:
            pool = ConnectionPool(srv.url, limit=2)
            results = await fetch(pool, n=6)
            assert pool.waited == 4 and pool.peak_connections == 2
            # outstanding requests end as cancelled when the pool closes
            loop = asyncio.get_running_loop()
            pending = [loop.create_future() for _ in range(3)]
            for f in pending:
                pool.request("GET", "/", {}, b"", lambda s, b, e, sent, ms, f=f: f.set_result(e))
            await asyncio.sleep(0.01)
            pool.close()
            cancelled = await asyncio.wait_for(asyncio.gather(*pending), 2)
            return results, srv.connections, cancelled

    results, connections, cancelled = run(main())
    assert [(s, b, e) for s, b, e, _ in results] == [(200, b"hello", None)] * 6
    assert connections == 2
    assert [classify_error(e) for e in cancelled] == ["cancelled"] * 3


def test_refused_connection_is_unreachable_and_source_address_binds():
    async def main():
        async with RawServer(lambda req: OK_LEN) as srv:
            url = srv.url
            pool = ConnectionPool(url, local_addr="127.0.0.1")
            ok = await fetch(pool)
            pool.close()
        await asyncio.sleep(0.05)
        pool = ConnectionPool(url, limit=2)  # more requests than attempts: each still fails once
        refused = await asyncio.wait_for(fetch(pool, n=5), 5)
        pool.close()
        return ok, refused

    ok, refused = run(main())
    assert ok[0][0] == 200
    assert [classify_error(e) for _, _, e, _ in refused] == ["unreachable"] * 5


def test_https_is_refused():
    async def main():
        ConnectionPool("https://127.0.0.1:1")

    with pytest.raises(ValueError, match="plain http"):
        run(main())


def test_the_replicas_server_time_header_reaches_the_callback():
    answer = (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Testbed-Server-Ms: 12.5\r\n\r\nhello")
    bad = (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Testbed-Server-Ms: soon\r\n\r\nhello")

    async def main(raw):
        async with RawServer(lambda req: raw) as srv:
            pool = ConnectionPool(srv.url)
            fut = asyncio.get_running_loop().create_future()
            pool.request("GET", "/", {}, b"", lambda s, b, e, sent, ms: fut.set_result((s, e, ms)))
            out = await fut
            pool.close()
            return out

    assert run(main(answer)) == (200, None, 12.5)
    assert run(main(OK_LEN)) == (200, None, None)  # a real service sends none
    _status, error, ms = run(main(bad))
    assert isinstance(error, ProtocolViolation) and ms is None
