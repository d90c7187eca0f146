"""The replica's own HTTP server (testbed.cluster.wire): routing, errors, keep-alive, and the
request a plain handler reads."""

import asyncio
import json

from aiohttp import web

from testbed.cluster.wire import PlainRequest, PlainServer
from testbed.metrics.proxy import parse_head


async def _exchange(port: int, *raw: bytes) -> list[bytes]:
    """Send each raw request on one connection in turn; return each answer's bytes (read until
    its Content-Length is in), and b"" for the first that found the connection closed."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    out = []
    try:
        for data in raw:
            w.write(data)
            await w.drain()
            try:
                head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 5)
            except asyncio.IncompleteReadError as exc:
                out.append(exc.partial)
                break
            length = int(parse_head(head[:-4]).get("content-length", "0"))
            out.append(head + await r.readexactly(length))
    finally:
        w.close()
    return out


def _run(routes, *raw):
    async def main():
        server = PlainServer(routes, idle_timeout_s=5)
        port = await server.start("127.0.0.1", 0)
        try:
            return await _exchange(port, *raw)
        finally:
            await server.close()

    return asyncio.run(main())


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_routes_answer_and_unknown_paths_and_methods_are_refused():
    async def echo(request):
        return web.json_response({"method": request.method, "path": request.path,
                                  "text": request.query.get("text"),
                                  "due": request.headers.get("x-testbed-due"),
                                  "type": request.content_type, "body": await request.text()})

    routes = {("POST", "/api/x"): echo, ("GET", "/api/x"): echo, ("GET", "/only-get"): echo}
    got = _run(routes,
               b"POST /api/x?text=a+b%20c HTTP/1.1\r\nHost: h\r\nX-Testbed-Due: 12.5\r\n"
               b"Content-Type: Text/Plain; charset=utf-8\r\nContent-Length: 2\r\n\r\nhi",
               b"DELETE /only-get HTTP/1.1\r\nHost: h\r\n\r\n",
               b"GET /nowhere HTTP/1.1\r\nHost: h\r\n\r\n")
    first, wrong_method, unknown = got[:3]
    assert _status(first) == 200
    assert json.loads(first.split(b"\r\n\r\n", 1)[1]) == {
        "method": "POST", "path": "/api/x", "text": "a b c", "due": "12.5", "type": "text/plain",
        "body": "hi"}
    assert b"Content-Type: application/json; charset=utf-8\r\n" in first
    assert _status(wrong_method) == 405 and _status(unknown) == 404


def test_a_failing_route_is_a_500_and_the_connection_serves_the_next_request():
    calls = []

    async def flaky(request):
        calls.append(await request.read())
        if len(calls) == 1:
            raise RuntimeError("boom")
        if len(calls) == 2:
            raise web.HTTPBadRequest(text="no")
        return web.Response(body=b"ok", content_type="text/plain")

    req = b"POST /f HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx"
    got = _run({("POST", "/f"): flaky}, req, req, req)
    assert [_status(a) for a in got[:3]] == [500, 400, 200]
    assert got[2].endswith(b"\r\n\r\nok") and calls == [b"x"] * 3


def test_a_client_asking_to_close_gets_its_answer_then_the_end_of_the_connection():
    async def ok(request):
        return web.Response(text="fine")

    got = _run({("GET", "/"): ok}, b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
               b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
    assert _status(got[0]) == 200 and b"Connection: close\r\n" in got[0]
    assert got[1] == b""  # the second request found the connection closed


def test_a_plain_request_reads_json_and_headers_case_blind():
    head = parse_head(b"POST /a%20b?x=1&x=2&e= HTTP/1.1\r\ncontent-TYPE: application/json\r\n"
                      b"Authorization: Bearer t")
    req = PlainRequest(head, b'{"batch": 2}')
    assert req.path == "/a b" and req.query.getall("x") == ["1", "2"] and req.query["e"] == ""
    assert req.headers["authorization"] == "Bearer t" and req.content_type == "application/json"
    assert asyncio.run(req.json()) == {"batch": 2}
