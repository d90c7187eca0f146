"""HTTP/1.1 messages at the level a proxy needs: a head parsed, a body delimited by its length, its
chunks or the connection's end, and a connection's bytes cut into messages as they arrive. The
local balancer's two sides (testbed.metrics.downstream, testbed.metrics.upstream) are built on it
instead of an HTTP framework's client and server, whose request objects cost it about half a
millisecond of CPU a request (docs/pace.md)."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field

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
    # each header's name in lower case, in order, and the first value of each: made once, on the
    # first lookup (the balancer looks up about eight names a request, and filters the rest)
    _lower: list[str] | None = field(default=None, init=False, repr=False, compare=False)
    _first: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _index(self) -> list[str]:
        if self._lower is None:
            self._lower = [k.lower() for k, _ in self.headers]
            for name, (_, v) in zip(self._lower, self.headers, strict=True):
                self._first.setdefault(name, v)
        return self._lower

    def get(self, name: str, default: str | None = None) -> str | None:
        self._index()
        return self._first.get(name.lower(), default)

    def number(self, name: str) -> float | None:
        """The header's value as a number; None where it is absent or not one."""
        value = self.get(name)
        try:
            return None if value is None else float(value)
        except ValueError:
            return None

    def without(self, names: Container[str]) -> list[tuple[str, str]]:
        """Its headers but those whose lower-case name is in `names` (a proxy's hop-by-hop ones)."""
        return [kv for name, kv in zip(self._index(), self.headers, strict=True) if name not in names]

    @property
    def keep_alive(self) -> bool:
        """Whether the connection stays open after this message (HTTP/1.1 unless `close`)."""
        conn = (self.get("connection") or "").lower()
        version = self.line[0] if self.line[0].startswith("HTTP/") else self.line[2]
        return "close" not in conn if version != "HTTP/1.0" else "keep-alive" in conn


def parse_head(raw: bytes) -> Head:
    """A message's head from its bytes up to (not including) the blank line that ends it."""
    lines = raw.decode("latin-1").split("\r\n")
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


CHUNKED, TO_EOF = -1, -2  # body_length's two answers that are not a length


def body_length(head: Head, *, response_to: str = "") -> int:
    """How the message's body is delimited: its length in bytes, CHUNKED, or TO_EOF (a response
    that states neither; a request that states neither has none, as has a response to HEAD or a
    1xx/204/304). `response_to`: the request's method when `head` is a response's."""
    if response_to:
        status = int(head.line[1])
        if response_to == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return 0
    if "chunked" in (head.get("transfer-encoding") or "").lower():
        return CHUNKED
    length = head.get("content-length")
    if length is None:
        return TO_EOF if response_to else 0
    try:
        n = int(length)
    except ValueError:
        raise BadMessage(f"Content-Length {length[:20]!r} is not a number") from None
    if not 0 <= n <= MAX_BODY:
        raise BadMessage(f"a body of {n} bytes", 413)
    return n


def take_chunked(buf: bytearray | bytes, start: int) -> tuple[bytes, int] | None:
    """A chunked body that begins at `buf[start]`, joined, and the offset past its end (trailers
    left out); None while it is incomplete."""
    parts, total, at = [], 0, start
    while True:
        eol = buf.find(b"\r\n", at)
        if eol < 0:
            return None
        try:
            size = int(bytes(buf[at:eol]).split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadMessage("a chunk size is not hexadecimal") from None
        at = eol + 2
        if size == 0:
            while True:  # trailers, up to the empty line
                eol = buf.find(b"\r\n", at)
                if eol < 0:
                    return None
                done, at = eol == at, eol + 2
                if done:
                    return b"".join(parts), at
        total += size
        if total > MAX_BODY:
            raise BadMessage(f"a body of more than {MAX_BODY} bytes", 413)
        if len(buf) < at + size + 2:
            return None
        parts.append(bytes(buf[at:at + size]))
        at += size + 2  # the chunk's CRLF


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


class MessageBuffer:
    """The bytes one connection has received, cut into messages as each completes: `head()` once
    its blank line is in, then `body(length)` once its body is (length as `body_length` gives it)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.current: Head | None = None  # the head of the message being received
        self._body_at = 0

    def feed(self, data: bytes) -> None:
        self.data += data

    def head(self) -> Head | None:
        """The current message's head, parsed once it is all in (None until then)."""
        if self.current is None:
            end = self.data.find(b"\r\n\r\n")
            if end < 0 or end > MAX_HEAD:
                if end > MAX_HEAD or len(self.data) > MAX_HEAD:
                    raise BadMessage("the head is too large", 431)
                return None
            self.current = parse_head(bytes(self.data[:end]))
            self._body_at = end + 4
        return self.current

    def body(self, length: int, *, eof: bool = False) -> bytes | None:
        """The current message's body once it is all in (then the next message begins), None
        until then; a TO_EOF body is in once the connection's end (`eof`) is."""
        at = self._body_at
        if length >= 0:
            if len(self.data) - at < length:
                return None
            end = at + length
            with memoryview(self.data) as view:  # one copy (a bytearray's slice is a second)
                body = bytes(view[at:end])
        elif length == CHUNKED:
            got = take_chunked(self.data, at)
            if got is None:
                return None
            body, end = got
        else:
            if not eof:
                return None
            body, end = bytes(self.data[at:]), len(self.data)
        if end == len(self.data):
            self.data = bytearray()  # the common case: nothing of the next message yet
        else:
            del self.data[:end]
        self.current = None
        return body


