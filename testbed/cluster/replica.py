"""One emulated replica of an AI service: an HTTP server speaking the service's real API, with
the profile's capacity, queue limit, processing time and startup time (divided by a time-scale
factor). testbed.cluster.serving runs one as a process (`python3 -m testbed.cluster.serving
--service imgcls --profile-file PATH`).

`POST /_config` changes the batch size and the interference stretch of a running replica (the
cluster tells it when its neighbours on the emulated GPU change); it needs
`Authorization: Bearer <token>`, the token the cluster hands its replicas in TOKEN_ENV (the
environment, not the command line that every user can read). A replica without one refuses it."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import hmac
import math
import random
import time
from dataclasses import dataclass

from aiohttp import web

from testbed.clock import REAL_TIME, ScenarioClock
from testbed.cluster.handlers import handler_for
from testbed.metrics.meter import BUSY_S_HEADER, DUE_HEADER, SERVER_MS_HEADER
from testbed.profiles import ServiceProfile
from testbed.timer import PreciseWake

TOKEN_ENV = "TESTBED_REPLICA_TOKEN"  # the cluster's token for /_config


@dataclass(frozen=True)
class HandlerWork:
    """What a replica's handler does for a request besides spending the profile's time."""

    use_espeak: bool = True  # tts synthesises with espeak where it is installed
    sleep_only: bool = False  # the handler skips its work; the profile's time is still spent


@dataclass(frozen=True)
class ReplicaGpu:
    """A replica's place on its emulated GPU: batch size and MPS share (issue 15; either needs
    the profile's gpu curve) and 1 + InSS's interference term for its neighbours there (the
    cluster computes it from the placement: every processing time is multiplied by it)."""

    batch: int = 1
    share_pct: float | None = None
    stretch: float = 1.0


ALONE = ReplicaGpu()
FULL_WORK = HandlerWork()


class EmulatedReplica:
    """Admission (capacity + queue limit), timing and readiness of one replica."""

    def __init__(
        self, service: str, profile: ServiceProfile, *,
        clock: ScenarioClock = REAL_TIME,
        seed: int | None = None,
        work: HandlerWork = FULL_WORK,
        launched_at: float | None = None,
        warm: bool = False,
        gpu: ReplicaGpu = ALONE,
        admin_token: str | None = None,
    ):
        self.service = service
        self.handler = handler_for(profile, service)  # what a request to this service does
        self.profile = profile
        self.clock = clock  # the run's time scale: every profile time is spent on its wall
        self.use_espeak = work.use_espeak
        self.sleep_only = work.sleep_only
        self.rng = random.Random(seed)
        # The replica keeps its queue's schedule as an ideal one would: each slot's moment of
        # freedom (monotonic s, a heap). A request starts when it arrived or when the earliest
        # slot became free on that schedule, and ends its drawn time later; its answer's server
        # time is that end less its arrival. The event loop's late wakes (a fraction of a ms)
        # then neither lengthen a request's time nor cost capacity: at time scale 16 each would
        # count 16 times. Only work that outlasts its drawn time (real work) moves the schedule.
        self._free_at = [0.0] * profile.capacity
        self._batch_free_at = 0.0
        self._busy_done = 0.0  # busy slot-seconds on that schedule of the requests (batches) done
        self._busy_open: dict[object, tuple[float, float]] = {}  # (start, end) in process, by key
        self.late_s = 0.0  # how late the replica's own last wake came (s): the machine's lag
        # wakes to the microsecond (testbed.timer): asyncio's sleep overruns by up to a ms, which
        # at time scale 16 is 16 of the profile's
        self._wake: PreciseWake | None = None
        # Startup counts from the launch (epoch seconds from the cluster), so the interpreter's own
        # start-up is part of it rather than added to it.
        self.started = time.monotonic() - (max(0.0, time.time() - launched_at) if launched_at else 0.0)
        self.ready_at = self.started + (0.0 if warm else clock.wall(profile.startup_ms / 1000.0))
        self.draining = False
        self._working = 0  # requests holding a slot (real work)
        self._queued = 0  # requests waiting for a slot (real work)
        # a sleeping replica's requests, each reserved on the schedule when it arrives: key ->
        # (start, end), kept until its answer leaves (end, plus the hold of its placement)
        self._reserved: dict[object, tuple[float, float]] = {}
        self.served = self.dropped = 0
        self._slots = asyncio.Semaphore(profile.capacity)
        self._idle = asyncio.Event()
        self._idle.set()
        # with a gpu curve and a batch or share set, requests queue for a batcher that closes a
        # batch on size or after a quarter of the SLO and takes the curve's time; otherwise the
        # DRAFAS path above (capacity slots, batch 1) serves them unchanged.
        self._batched = gpu.batch != 1 or gpu.share_pct is not None
        if self._batched and profile.gpu is None:
            raise ValueError(f"{service}: batch/share need the profile's gpu curve")
        if not (math.isfinite(gpu.stretch) and gpu.stretch >= 1.0):
            raise ValueError(f"stretch must be a finite number >= 1, got {gpu.stretch}")
        self.batch, self.share_pct, self.stretch = gpu.batch, gpu.share_pct, gpu.stretch
        self._admin = f"Bearer {admin_token}".encode() if admin_token else None
        self._queue: list[tuple[float, asyncio.Future, object]] = []
        self._kick = asyncio.Event()
        self._batcher: asyncio.Task | None = None

    @property
    def share(self) -> float:
        """The MPS share (%) it runs at: the one it was given, else the profile's (DRAFAS's 25 %
        per unit)."""
        if self.share_pct is not None:
            return self.share_pct
        return self.profile.gpu.ref_share_pct if self.profile.gpu else 25.0 * self.profile.units

    @property
    def in_process(self) -> int:
        """Requests in process now: holding a slot, or on the schedule between start and end."""
        now = time.monotonic()
        return self._working + sum(1 for s, e in self._reserved.values() if s <= now < e)

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot now (on the schedule: not started yet)."""
        now = time.monotonic()
        return self._queued + sum(1 for s, _ in self._reserved.values() if now < s)

    @property
    def ready(self) -> bool:
        return not self.draining and time.monotonic() >= self.ready_at

    def plain_routes(self) -> dict:  # type: ignore[type-arg]
        """Its routes ((method, path) -> route), for either server: testbed.cluster.wire's or
        aiohttp's (`app`)."""
        return {("GET", "/healthz"): self.healthz, ("GET", "/"): self.healthz,
                ("POST", "/_config"): self.set_config,
                (self.handler.method, self.handler.path): self.serve_request}

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        for (method, path), route in self.plain_routes().items():
            app.router.add_route(method, path, route)
        return app

    async def healthz(self, request: web.Request) -> web.Response:
        state = {
            "service": self.service,
            "ready": self.ready,
            "draining": self.draining,
            "in_process": self.in_process,
            "waiting": self.waiting,
            "batch": self.batch,
            "share_pct": self.share,
            "stretch": self.stretch,
        }
        if not self.ready and not self.draining:
            # when it will be: the cluster waits that long rather than polling (at time scale 16
            # a 50 ms poll is 0.8 s of scenario time added to each start)
            state["ready_in_s"] = round(max(0.0, self.ready_at - time.monotonic()), 6)
        return web.json_response(state, status=200 if self.ready else 503)

    async def set_config(self, request: web.Request) -> web.Response:
        """POST {"batch": n, "stretch": x} (either or both): a new batch size at once (FA2
        reconfigures batches without a restart) and the interference stretch from now on."""
        if self._admin is None:
            return web.json_response({"error": "this replica takes no configuration"}, status=403)
        if not hmac.compare_digest(request.headers.get("Authorization", "").encode(), self._admin):
            return web.json_response({"error": "admin token required"}, status=401)
        try:
            doc = await request.json()
            if not isinstance(doc, dict) or not doc.keys() & {"batch", "stretch"} \
                    or doc.keys() - {"batch", "stretch"}:
                raise ValueError
            batch = doc.get("batch", self.batch)
            stretch = doc.get("stretch", self.stretch)
            if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
                raise ValueError
            if isinstance(stretch, bool) or not isinstance(stretch, int | float) \
                    or not math.isfinite(stretch) or stretch < 1.0:
                raise ValueError
        except (ValueError, TypeError):
            return web.json_response(
                {"error": "body must be JSON with 'batch' (an integer >= 1) and/or 'stretch' "
                          "(a number >= 1)"}, status=400)
        if batch != 1 and self.profile.gpu is None:
            return web.json_response({"error": "the profile has no gpu curve"}, status=400)
        self.batch = batch
        self.stretch = float(stretch)
        self._batched = self._batched or batch != 1
        return web.json_response({"batch": self.batch, "share_pct": self.share_pct,
                                  "stretch": self.stretch})

    async def _run(self, work, arrived: float, hold: float = 0.0):  # type: ignore[no-untyped-def]
        """Admit, wait for a slot, do the work, wait until the schedule's end (and `hold` s
        after it). Returns the answer and that end (monotonic s)."""
        if self._batched:
            response, end = await self._run_batched(work, arrived)
        elif not self.ready:
            return web.json_response(
                {"error": "not ready" if not self.draining else "shutting down"}, status=503
            ), time.monotonic()
        elif self._open() >= self.profile.capacity + self.profile.queue_limit:
            self.dropped += 1
            return web.json_response({"error": "queue full"}, status=503), time.monotonic()
        elif self.sleep_only:
            return await self._run_reserved(work, arrived, hold)
        else:
            response, end = await self._run_in_slot(work, arrived)
        if hold > 0.0:
            await self._wait_until(end + hold)
        return response, end

    def _drawn_end(self, start: float) -> float:
        """A request's end on the schedule: `start` plus a processing time drawn from the
        profile, stretched by the interference, on the run's clock (monotonic s)."""
        lo, hi = self.profile.proc_time_ms
        return start + self.clock.wall(self.rng.uniform(lo, hi) * self.stretch / 1000.0)

    def _open(self) -> int:
        """Requests admitted and not done on the schedule (in a slot, waiting for one, or
        reserved with an end still ahead)."""
        now = time.monotonic()
        return self._working + self._queued + sum(1 for _, e in self._reserved.values() if e > now)

    async def _run_reserved(self, work, arrived: float, hold: float):  # type: ignore[no-untyped-def]
        """A sleeping replica's request: its slot is taken on the schedule as it arrives (the
        earliest free one, as the slots' queue would hand it on), its work (next to none) done,
        and its answer sent at the schedule's end plus `hold`, in one wake. A slot's queue of
        real work wakes at the end, then again after the hold: two more turns of the event loop
        per request, a fifth of a sleeping replica's CPU at time scale 16 (docs/pace.md)."""
        self._idle.clear()
        start = max(arrived, heapq.heappop(self._free_at))
        end = self._drawn_end(start)
        heapq.heappush(self._free_at, end)
        key = object()
        self._reserved[key] = self._busy_open[key] = (start, end)
        try:
            began = time.monotonic()
            result = await work()
            if time.monotonic() - began > end - start:  # work that outlasts its draw is the replica's
                later = start + (time.monotonic() - began)
                self._free_at[self._free_at.index(end)] = later
                heapq.heapify(self._free_at)
                end = later
                self._reserved[key] = self._busy_open[key] = (start, end)
            await self._wait_until(end + hold)
            self.served += 1
            return result, end
        finally:
            del self._reserved[key], self._busy_open[key]
            self._busy_done += end - start
            if not self._reserved and self._working == 0 and self._queued == 0:
                self._idle.set()

    async def _run_in_slot(self, work, arrived: float):  # type: ignore[no-untyped-def]
        """Real work: wait for a slot, do the work, wait until the schedule's end."""
        self._queued += 1
        self._idle.clear()
        admitted = False
        try:
            async with self._slots:
                self._queued -= 1
                admitted = True
                self._working += 1
                start = max(arrived, heapq.heappop(self._free_at))
                end = self._drawn_end(start)
                key = object()
                self._busy_open[key] = (start, end)
                try:
                    began = time.monotonic()
                    result = await work()
                    # work longer than its drawn time (real work) is the replica's own
                    end = max(end, start + (time.monotonic() - began))
                    self._busy_open[key] = (start, end)
                    await self._wait_until(end)
                    self.served += 1
                    return result, end
                finally:
                    del self._busy_open[key]
                    self._busy_done += end - start
                    heapq.heappush(self._free_at, end)
                    self._working -= 1
        finally:
            if not admitted:
                self._queued -= 1  # cancelled (client went away) while queued
            if self._working == 0 and self._queued == 0 and not self._reserved:
                self._idle.set()

    def busy_seconds(self, now: float) -> float:
        """Its busy seconds up to `now` (monotonic s) on its schedule: the integral of
        min(in_process, capacity) / capacity (a batcher: the time a batch was in process)."""
        open_ = sum(max(0.0, min(now, end) - start) for start, end in self._busy_open.values())
        return (self._busy_done + open_) / (1 if self._batched else self.profile.capacity)

    async def _wait_until(self, due: float) -> None:
        """Wake at `due` (monotonic s), to the microsecond where the machine allows."""
        if due <= time.monotonic():
            return
        if self._wake is None:
            self._wake = PreciseWake(asyncio.get_running_loop())
        await self._wake.until(due)
        self.late_s = max(0.0, time.monotonic() - due)

    async def _run_batched(self, work, arrived: float):  # type: ignore[no-untyped-def]
        """Queue for the batcher; drop when ceil(queue_limit / batch) batches already wait."""
        if not self.ready:
            return web.json_response(
                {"error": "not ready" if not self.draining else "shutting down"}, status=503
            ), time.monotonic()
        waiting_batches = -(-self.profile.queue_limit // self.batch)
        if len(self._queue) >= self.batch * waiting_batches:
            self.dropped += 1
            return web.json_response({"error": "queue full"}, status=503), time.monotonic()
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._queue.append((arrived, fut, work))
        self._queued += 1
        self._idle.clear()
        self._kick.set()
        if self._batcher is None or self._batcher.done():
            self._batcher = asyncio.create_task(self._batch_loop())
        return await fut

    async def _batch_loop(self) -> None:
        g = self.profile.gpu
        assert g is not None
        wait_s = self.clock.wall(0.25 * self.profile.slo_ms / 1000.0)
        while self._queue:
            first = self._queue[0][0]
            while len(self._queue) < self.batch and time.monotonic() < first + wait_s:
                self._kick.clear()
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await asyncio.wait_for(self._kick.wait(), first + wait_s - time.monotonic())
            take, self._queue = self._queue[: self.batch], self._queue[self.batch :]
            self._queued -= len(take)
            self._working = len(take)
            # on the schedule, a batch closes when full (its last arrival) or a quarter of the
            # SLO after its first, and not before the previous batch's end
            closed = min(first + wait_s, take[-1][0]) if len(take) == self.batch else first + wait_s
            start = min(max(self._batch_free_at, closed), time.monotonic())
            lo, hi = self.profile.proc_time_ms
            draw = sum(self.rng.uniform(lo, hi) for _ in take) / len(take)
            share = g.ref_share_pct if self.share_pct is None else self.share_pct
            end = start + self.clock.wall(draw * g.factor(len(take), share) * self.stretch
                                          / 1000.0)
            self._busy_open[self] = (start, end)
            try:
                began = time.monotonic()
                results = await asyncio.gather(*(w() for _, _, w in take), return_exceptions=True)
                end = max(end, start + (time.monotonic() - began))
                self._busy_open[self] = (start, end)
                await self._wait_until(end)
            finally:
                del self._busy_open[self]
                self._busy_done += end - start
            self._batch_free_at = end
            for (_, fut, _), res in zip(take, results, strict=True):
                if fut.done():
                    continue
                if isinstance(res, BaseException):
                    fut.set_exception(res)
                else:
                    self.served += 1
                    fut.set_result((res, end))
            self._working = 0
        self._idle.set()

    async def serve_request(self, request: web.Request) -> web.StreamResponse:
        """Let the service's handler read the request, then run its work under this replica's
        admission and timing (an immediate answer, e.g. a 400, is not admitted)."""
        prepared = await self.handler.prepare(request, self)
        if isinstance(prepared, web.StreamResponse):
            return prepared
        arrived = time.monotonic()
        placed, hold = self._placed(request, arrived)
        response, end = await self._run(prepared, placed, hold)
        # the replica's own time on its schedule (queue, work): what a time scale compresses; the
        # client counts the rest (the network, the balancer, a late wake) at its real duration
        response.headers[SERVER_MS_HEADER] = f"{(end - placed) * 1000.0:.3f}"
        response.headers[BUSY_S_HEADER] = f"{self.busy_seconds(time.monotonic()):.6f}"
        return response

    def _placed(self, request: web.Request, arrived: float) -> tuple[float, float]:
        """Where a request's arrival lies on the replica's schedule and how long its answer is
        held after the schedule's end (monotonic s): ScenarioClock.placed, from DUE_HEADER."""
        try:
            due = float(request.headers[DUE_HEADER]) - (time.time() - time.monotonic())
        except (KeyError, ValueError):
            return arrived, 0.0
        return self.clock.placed(due, arrived)

    async def drain(self) -> None:
        """Refuse new requests (and report not ready), then wait for admitted ones to finish."""
        self.draining = True
        await self._idle.wait()
