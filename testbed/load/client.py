"""The asyncio load client: open-loop replay of a schedule (trace or constant rate) driven by one
scheduler loop, and closed-loop workers for profiling; every request becomes a RequestRecord."""

from __future__ import annotations

import asyncio
import errno
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import aiohttp
from yarl import URL

from testbed.load.api import MalformedResponse, PreparedRequest, build_request, check_response
from testbed.load.content import ContentSet
from testbed.load.records import RequestRecord

Sink = Callable[[RequestRecord], None]

DEFAULT_TIMEOUT_S = 4.0
_RESET_ERRNOS = {errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED}


@dataclass
class ClientConfig:
    service: str
    base_url: str  # the service's endpoint, e.g. http://10.200.0.2:8001
    slice: str | None = None  # recorded with every request
    timeout_s: float = DEFAULT_TIMEOUT_S
    source_address: str | None = None  # bind outgoing connections to this local IP
    # Open loop wants a connection per outstanding request, but a stalled server must not make the
    # client open thousands of sockets (fd exhaustion on both sides): beyond this, requests wait.
    max_connections: int = 256
    seed: int = 0
    check: bool = True  # validate response bodies against the service's API


@dataclass
class ClientSummary:
    scheduled: int = 0
    completed: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> int:
        return self.completed - sum(self.errors.values())


class LoadClient:
    """One service's client. `async with LoadClient(cfg, sinks) as c: await c.run_open_loop(...)`."""

    def __init__(self, config: ClientConfig, sinks: Iterable[Sink] = (), content: ContentSet | None = None,
                 request_factory: Callable[[], PreparedRequest] | None = None):
        self.config = config
        self.sinks = list(sinks)
        self.content = content or ContentSet(seed=config.seed)
        self._factory = request_factory or (lambda: build_request(config.service, self.content))
        self.summary = ClientSummary()
        self.in_flight = 0
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._seq = 0
        self._base = config.base_url.rstrip("/")
        self._urls: dict[str, URL] = {}  # parsed once per distinct target: URL parsing is costly
        # One clock mapping for scheduled and sent times: wall = _wall0 + (loop.time() - _mono0)
        self._mono0 = 0.0
        self._wall0 = 0.0

    async def __aenter__(self) -> LoadClient:
        local = (self.config.source_address, 0) if self.config.source_address else None
        connector = aiohttp.TCPConnector(limit=self.config.max_connections, local_addr=local,
                                         force_close=False, enable_cleanup_closed=False)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=self.config.timeout_s),
            auto_decompress=False, skip_auto_headers=("User-Agent",),
        )
        self._factory()  # builds the content pools now, not inside the first timed request
        loop = asyncio.get_running_loop()
        self._mono0, self._wall0 = loop.time(), time.time()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._cancel_all()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _wall(self, mono: float) -> float:
        return self._wall0 + (mono - self._mono0)

    async def run_open_loop(self, offsets: Iterable[float], lead_s: float = 0.05) -> ClientSummary:
        """Send one request at each offset (seconds from now + lead), never waiting for answers;
        then wait for the outstanding ones. Cancelling records the in-flight ones as 'cancelled'."""
        loop = asyncio.get_running_loop()
        t0 = loop.time() + lead_s
        it = iter(offsets)
        nxt = next(it, None)
        try:
            while nxt is not None:
                now = loop.time()
                due = t0 + nxt
                if due > now:
                    await asyncio.sleep(due - now)
                    continue
                while nxt is not None and t0 + nxt <= now:
                    self._launch(t0 + nxt)
                    nxt = next(it, None)
            await self.drain()
        except asyncio.CancelledError:
            await self._cancel_all()
            raise
        return self.summary

    async def run_closed_loop(self, workers: int = 1, duration_s: float | None = None,
                              requests: int | None = None) -> ClientSummary:
        """`workers` loops that each send the next request when the last one returns."""
        if duration_s is None and requests is None:
            raise ValueError("give duration_s or requests")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + duration_s if duration_s is not None else float("inf")
        budget = [requests if requests is not None else -1]

        async def worker() -> None:
            while loop.time() < deadline and budget[0] != 0:
                budget[0] -= 1
                now = loop.time()
                self._seq += 1
                self.summary.scheduled += 1
                await self._send(self._seq, now)

        tasks = [asyncio.create_task(worker()) for _ in range(workers)]
        try:
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return self.summary

    def _launch(self, scheduled_mono: float) -> None:
        self._seq += 1
        self.summary.scheduled += 1
        task = asyncio.get_running_loop().create_task(self._send(self._seq, scheduled_mono))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _cancel_all(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _send(self, seq: int, scheduled_mono: float) -> None:
        assert self._session is not None, "use `async with LoadClient(...)`"
        loop = asyncio.get_running_loop()
        req = self._factory()
        status, down, error = 0, 0, None
        self.in_flight += 1
        sent_mono = loop.time()
        try:
            async with self._session.request(req.method, self._url(req.target), data=req.body or None,
                                             headers=req.headers) as resp:
                status = resp.status
                body = await resp.read()
                down = len(body)
            if status >= 500:
                error = "http_5xx"
            elif status >= 400:
                error = "http_4xx"
            elif self.config.check:
                check_response(self.config.service, body)
        except asyncio.CancelledError:
            error = "cancelled"
            raise
        except MalformedResponse:
            error = "malformed"
        except BaseException as exc:
            error = classify_error(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            end = loop.time()
            self.in_flight -= 1
            self._emit(RequestRecord(
                service=self.config.service, slice=self.config.slice, seq=seq,
                scheduled=self._wall(scheduled_mono), sent=self._wall(sent_mono),
                latency_ms=(end - sent_mono) * 1000.0, latency_sched_ms=(end - scheduled_mono) * 1000.0,
                status=status, bytes_up=req.bytes_up, bytes_down=down, error=error,
            ))

    def _url(self, target: str) -> URL:
        url = self._urls.get(target)
        if url is None:
            if len(self._urls) > 4096:
                self._urls.clear()
            url = self._urls[target] = URL(self._base + target, encoded=True)
        return url

    def _emit(self, record: RequestRecord) -> None:
        self.summary.completed += 1
        if record.error:
            self.summary.errors[record.error] += 1
        for sink in self.sinks:
            sink(record)


def classify_error(exc: BaseException) -> str:
    """Map a client-side exception to an error kind of testbed.load.records.ERROR_KINDS."""
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "unreachable"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return "reset"
    if isinstance(exc, aiohttp.ClientResponseError):
        return "malformed"  # the server's HTTP itself did not parse
    if isinstance(exc, aiohttp.ClientOSError | ConnectionError):
        err = getattr(exc, "errno", None)
        return "reset" if err in _RESET_ERRNOS or isinstance(exc, ConnectionResetError) else "unreachable"
    if isinstance(exc, aiohttp.ClientError):
        return "other"
    return "other"
