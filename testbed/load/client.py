"""The asyncio load client: open-loop replay of a schedule (trace or constant rate) driven by one
scheduler, and closed-loop workers for profiling; every request becomes a RequestRecord.

Requests go out through the lean HTTP/1.1 pool of testbed.load.http1 (aiohttp costs ~300 µs of CPU
per request, too much for 2000 req/s from one process): the scheduler writes each request's bytes
itself, and every completed response also lets the scheduler send whatever has fallen due, so a
burst of answers cannot hold back sending."""

from __future__ import annotations

import asyncio
import errno
import gc
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from testbed.load.api import MalformedResponse, PreparedRequest, service_client
from testbed.load.content import ContentSet
from testbed.load.http1 import ConnectionDropped, ConnectionPool, ProtocolViolation, RequestCancelled
from testbed.load.records import RequestRecord
from testbed.metrics.meter import DUE_HEADER
from testbed.profiles import ServiceProfile
from testbed.timer import PreciseWake

Sink = Callable[[RequestRecord], None]

DEFAULT_TIMEOUT_S = 4.0
_RESET_ERRNOS = {errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED}


@dataclass
class ClientConfig:
    """How a LoadClient sends: the service and its endpoint, the slice its records carry, the
    timeout, the local addresses to bind (a UE group's UEs: requests take them in turn), the
    connection limit, keep-alive or a connection per request, the content seed, whether answers
    are checked, and the service's profile."""
    service: str
    base_url: str  # the service's endpoint, e.g. http://10.200.0.2:8001
    slice: str | None = None  # recorded with every request
    ue_group: str | None = None  # recorded with every request too
    timeout_s: float = DEFAULT_TIMEOUT_S
    # bind outgoing connections to these local IPs: request k leaves from address k mod len, each
    # address with connections of its own (a UE group's UEs, each with its own AMBR leaf)
    source_addresses: tuple[str, ...] = ()
    # Open loop wants a connection per outstanding request, but a stalled server must not make the
    # client open thousands of sockets (fd exhaustion on both sides): beyond this, requests wait.
    max_connections: int = 256
    keep_alive: bool = True  # False: a new connection for every request (Connection: close)
    seed: int = 0
    check: bool = True  # validate response bodies against the service's API
    profile: ServiceProfile | None = None  # the service's profile (default: the registry's)


@dataclass
class ClientSummary:
    """What a client's run did: requests scheduled, completed, and errors by kind."""
    scheduled: int = 0
    completed: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> int:
        """Completed requests that got a valid answer."""
        return self.completed - sum(self.errors.values())


class LoadClient:
    """One service's client. `async with LoadClient(cfg, sinks) as c: await c.run_open_loop(...)`."""

    def __init__(self, config: ClientConfig, sinks: Iterable[Sink] = (), content: ContentSet | None = None,
                 request_factory: Callable[[], PreparedRequest] | None = None):
        self.config = config
        self.sinks = list(sinks)
        self.content = content or ContentSet(seed=config.seed)
        self.api = service_client(config.service, config.profile)  # builds requests, checks answers
        self._factory = request_factory or (lambda: self.api.build(self.content))
        self.summary = ClientSummary()
        self.in_flight = 0
        self._pools: list[ConnectionPool] = []  # one per source address (or one unbound)
        self._idle: asyncio.Event | None = None  # set whenever nothing is in flight
        self._seq = 0
        # the open-loop schedule being replayed: monotonic start and the next offset
        self._schedule: Iterator[float] | None = None
        self._t0 = 0.0
        self._next: float | None = None
        self._pumping = False
        # One clock mapping for scheduled and sent times: wall = _wall0 + (loop.time() - _mono0)
        self._mono0 = 0.0
        self._wall0 = 0.0

    async def __aenter__(self) -> LoadClient:
        sources = self.config.source_addresses or (None,)
        limit = max(1, -(-self.config.max_connections // len(sources)))
        self._pools = [ConnectionPool(self.config.base_url, limit=limit,
                                      timeout_s=self.config.timeout_s, local_addr=source,
                                      keep_alive=self.config.keep_alive)
                       for source in sources]
        self._idle = asyncio.Event()
        self._idle.set()
        self._factory()  # builds the content pools now, not inside the first timed request
        loop = asyncio.get_running_loop()
        self._mono0, self._wall0 = loop.time(), time.time()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel what is outstanding (each ends recorded as 'cancelled') and close the connections."""
        await self._cancel_all()
        self._pools = []

    def _wall(self, mono: float) -> float:
        return self._wall0 + (mono - self._mono0)

    async def run_open_loop(self, offsets: Iterable[float], lead_s: float = 0.05,
                            start_at: float | None = None) -> ClientSummary:
        """Send one request at each offset (seconds from now + lead, or from `start_at`), never
        waiting for answers; then wait for the outstanding ones. Cancelling records the in-flight
        ones as 'cancelled'.

        offsets: seconds, ascending; lead_s: added to each, so the first is not late; start_at:
        epoch seconds of the offsets' zero instead (several clients' common moment: one that is
        ready after it sends its first requests late, each recorded with its lateness)."""
        loop = asyncio.get_running_loop()
        self._t0 = (loop.time() + lead_s if start_at is None
                    else loop.time() + (start_at - time.time()))
        self._schedule = iter(offsets)
        self._next = next(self._schedule, None)
        # Everything allocated so far (imports, content pools) lives for the whole run: keep the
        # collector from re-scanning it, which otherwise stalls sending for tens of milliseconds.
        gc.freeze()
        wake = PreciseWake(loop)
        try:
            while self._next is not None:
                self._send_due()
                if self._next is None:
                    break
                await wake.until(self._t0 + self._next)
            self._schedule = None
            await self.drain()
        except asyncio.CancelledError:
            self._schedule = None
            await self._cancel_all()
            raise
        finally:
            wake.close()
            self._schedule = None
            gc.unfreeze()
        return self.summary

    def _send_due(self) -> None:
        """Send every request whose time has come. Called by the scheduler loop and after each
        response, so sending keeps pace even while answers arrive in bulk."""
        if self._pumping or self._schedule is None:
            return
        self._pumping = True
        try:
            now = self._pools[0].loop.time() if self._pools else 0.0
            t0, nxt, it = self._t0, self._next, self._schedule
            while nxt is not None and t0 + nxt <= now:
                self._launch(t0 + nxt)
                nxt = next(it, None)
            self._next = nxt
        finally:
            self._pumping = False

    async def run_closed_loop(self, workers: int = 1, duration_s: float | None = None,
                              requests: int | None = None) -> ClientSummary:
        """`workers` loops that each send the next request when the last one returns.

        workers: concurrent loops; duration_s: stop sending after this many seconds; requests: or
        after this many requests in all."""
        if duration_s is None and requests is None:
            raise ValueError("give duration_s or requests")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + duration_s if duration_s is not None else float("inf")
        budget = [requests if requests is not None else -1]

        async def worker() -> None:
            while loop.time() < deadline and budget[0] != 0:
                budget[0] -= 1
                done = loop.create_future()
                self._launch(loop.time(), done)
                await done

        tasks = [asyncio.create_task(worker()) for _ in range(workers)]
        try:
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._cancel_all()
            raise
        return self.summary

    def _launch(self, scheduled_mono: float, done: asyncio.Future[None] | None = None) -> None:
        pools = self._pools
        assert pools, "use `async with LoadClient(...)`"
        self._seq += 1
        seq = self._seq
        pool = pools[(seq - 1) % len(pools)]
        ue = self.config.source_addresses[(seq - 1) % len(pools)] if self.config.source_addresses else None
        dispatched_mono = pool.loop.time()
        self.summary.scheduled += 1
        req = self._factory()
        self.in_flight += 1
        assert self._idle is not None
        self._idle.clear()

        def on_done(status: int, body: bytes, exc: BaseException | None, sent_mono: float,
                    server_ms: float | None) -> None:
            end = pool.loop.time()
            self.in_flight -= 1
            error = self._classify(status, body, exc)
            if not sent_mono:
                sent_mono = end  # never written (refused, cancelled): it failed the moment it tried
            self._emit(RequestRecord(
                service=self.config.service, slice=self.config.slice, ue_group=self.config.ue_group,
                ue=ue, seq=seq,
                scheduled=self._wall(scheduled_mono), sent=self._wall(sent_mono),
                latency_ms=(end - sent_mono) * 1000.0, latency_sched_ms=(end - scheduled_mono) * 1000.0,
                status=status, bytes_up=req.bytes_up, bytes_down=len(body), error=error,
                server_ms=server_ms, dispatched=self._wall(dispatched_mono),
            ))
            if done is not None and not done.done():
                done.set_result(None)
            if self.in_flight == 0:
                self._idle.set()  # type: ignore[union-attr]
            self._send_due()

        headers = {**req.headers, DUE_HEADER: f"{self._wall(scheduled_mono):.6f}"}
        pool.request(req.method, req.target, headers, req.body, on_done)

    def _classify(self, status: int, body: bytes, exc: BaseException | None) -> str | None:
        if exc is not None:
            return classify_error(exc)
        if status >= 500:
            return "http_5xx"
        if status >= 400:
            return "http_4xx"
        if self.config.check:
            try:
                self.api.check(body)
            except MalformedResponse:
                return "malformed"
        return None

    async def drain(self) -> None:
        """Wait until no request is outstanding."""
        assert self._idle is not None
        await self._idle.wait()

    async def _cancel_all(self) -> None:
        if self._pools:
            for pool in self._pools:
                pool.close()  # every outstanding request ends as 'cancelled'
            for _ in range(1000):  # connection attempts report their cancellation a tick later
                if not self.in_flight:
                    break
                await asyncio.sleep(0)

    def _emit(self, record: RequestRecord) -> None:
        self.summary.completed += 1
        if record.error:
            self.summary.errors[record.error] += 1
        for sink in self.sinks:
            sink(record)


def classify_error(exc: BaseException) -> str:
    """Map a client-side exception to an error kind of testbed.load.records.ERROR_KINDS.

    exc: the exception a request raised."""
    if isinstance(exc, RequestCancelled | asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "timeout"
    if isinstance(exc, ProtocolViolation):
        return "malformed"  # the server's HTTP itself did not parse
    if isinstance(exc, ConnectionDropped):
        return "reset"
    if isinstance(exc, OSError):  # connect() failures and socket errors
        err = getattr(exc, "errno", None)
        return "reset" if err in _RESET_ERRNOS or isinstance(exc, ConnectionResetError) else "unreachable"
    return "other"
