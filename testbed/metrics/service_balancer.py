"""One service's balancer on the local profile: round-robin over its ready replicas, a per-replica
count of in-flight requests, the time-weighted utilization between samples, and each answered
request in its window, the metrics and the mesh. `LoadBalancer` (testbed.metrics.balancer) holds
one per service and listens for them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from testbed.clock import REAL_TIME, ScenarioClock
from testbed.metrics.collector import ServiceCollector
from testbed.metrics.exposition import BalancerMetrics
from testbed.metrics.mesh import MeshMetrics, Workload
from testbed.metrics.meter import BUSY_S_HEADER, HOP_BY_HOP, SERVER_MS_HEADER
from testbed.metrics.proxy import Head, response
from testbed.metrics.upstream import Dropped, Refused, UpstreamPool
from testbed.metrics.window import WindowMetrics
from testbed.profiles import ServiceProfile

log = logging.getLogger(__name__)

MESH_NAMESPACE = "local"  # the `namespace` label of the local replicas' mesh-shaped series


@dataclass
class Backend:
    """One replica as the balancer sees it."""

    replica: str
    url: str
    in_flight: int = 0
    in_rotation: bool = True
    busy_s: float | None = None  # the replica's busy seconds at its last answer (BUSY_S_HEADER)
    answered: asyncio.Event | None = None  # set once taken out and nothing is in flight to it
    gauge: Any = None  # its in-flight gauge's labelled child


class ServiceBalancer:
    """Round-robin proxy for one service, counting what it sees."""

    def __init__(
        self,
        service: str,
        profile: ServiceProfile,
        metrics: BalancerMetrics,
        pool: UpstreamPool,
        upstream_timeout_s: float,
        clock: ScenarioClock = REAL_TIME,
        mesh: MeshMetrics | None = None,
    ):
        self.service = service
        self.mesh = mesh
        self.workload = Workload(service, MESH_NAMESPACE)
        self.profile = profile
        self.metrics = metrics
        # latencies are measured in wall time; the SLO threshold shrinks with the time scale
        self.collector = ServiceCollector(service, clock.wall(profile.slo_ms), profile.capacity)
        self.backends: dict[str, Backend] = {}
        self._ready: list[Backend] = []  # those in rotation, kept as they change (read per request)
        self._rr = 0
        self._pool = pool
        self.upstream_timeout_s = upstream_timeout_s
        self.on_failure: Callable[[str, str], None] | None = None  # (service, replica)
        # a client that closes its connection is normal during a run: counted, reported to
        # on_lost (service, when) for one line in the run's events, never a traceback
        self.lost_connections = 0
        self.on_lost: Callable[[str, str], None] | None = None
        self.clock = clock
        # docs/metrics.md "instance utilization": u(t), the mean over the replicas ready (in
        # rotation) at t of min(in_flight, capacity)/capacity, integrated over the time with a
        # ready replica; both since the last sample. A replica that reports its own busy seconds
        # (an emulated one) counts by its reports instead: its in-flight time here includes the
        # network to it, which a time scale does not compress
        self._busy_area = 0.0  # ∫ u(t) dt
        self._ready_time = 0.0  # ∫ [a replica is ready] dt
        self._busy_now = 0.0  # u(t) now
        self._any_ready = False
        self._busy_since = time.monotonic()
        # labelled children looked up once (labels() locks and builds a key on each call)
        self._requests_by_status: dict[int, Any] = {}
        self._violations_by_reason: dict[str, Any] = {}
        self._duration = metrics.duration.labels(service)
        metrics.capacity.labels(service).set(profile.capacity)
        metrics.ready.labels(service).set(0)

    def rotation(self) -> list[Backend]:
        return list(self._ready)

    def _rotation_changed(self) -> None:
        self._ready = [b for b in self.backends.values() if b.in_rotation]

    def add(self, replica: str, url: str) -> None:
        self.backends[replica] = Backend(replica, url.rstrip("/"))
        self._rotation_changed()
        if self.mesh is not None:
            self.mesh.replica(self.workload, replica, self.profile.capacity)
        self._busy_changed()
        self.metrics.in_flight.labels(self.service, replica).set(0)
        self.metrics.ready.labels(self.service).set(len(self.rotation()))

    def take_out(self, replica: str) -> None:
        """Stop sending new requests to `replica`; requests already sent still count."""
        b = self.backends.get(replica)
        if b is not None:
            b.in_rotation = False
            self._rotation_changed()
            self._busy_changed()
            if self.mesh is not None:
                self.mesh.unready(self.service, replica)
            self.metrics.ready.labels(self.service).set(len(self.rotation()))
            self._forget_if_idle(b)

    async def forwards_answered(self, replica: str) -> None:
        """Return once no request forwarded to `replica`, taken out of rotation, is in flight:
        one on its way to the replica when it was taken out reaches a replica still serving."""
        b = self.backends.get(replica)
        if b is None or b.in_rotation or b.in_flight == 0:
            return
        if b.answered is None:
            b.answered = asyncio.Event()
        await b.answered.wait()

    def _forget_if_idle(self, b: Backend) -> None:
        if not b.in_rotation and b.in_flight == 0 and self.backends.get(b.replica) is b:
            if b.answered is not None:
                b.answered.set()
            del self.backends[b.replica]
            if self.mesh is not None:
                self.mesh.forget(self.service, b.replica)
            with contextlib.suppress(KeyError):
                self.metrics.in_flight.remove(self.service, b.replica)

    def _pick(self) -> Backend | None:
        ready = self._ready
        if not ready:
            return None
        self._rr = (self._rr + 1) % len(ready)
        return ready[self._rr]

    def _busy_changed(self) -> None:
        """Integrate u(t) = mean over ready replicas of min(in_flight, capacity)/capacity up to
        now, then take its new value (a request started or finished, a replica came or went)."""
        now = time.monotonic()
        dt = now - self._busy_since
        self._busy_area += self._busy_now * dt
        if self._any_ready:
            self._ready_time += dt
        self._busy_since = now
        cap = self.profile.capacity
        ready = self._ready
        self._any_ready = bool(ready)
        self._busy_now = (sum(min(b.in_flight, cap) / cap for b in ready if b.busy_s is None)
                          / len(ready) if ready else 0.0)

    def _replica_reported(self, b: Backend, answer: Head) -> float | None:
        """Take a replica's answer's busy seconds into u(t) (and its mesh series); return its
        server time (ms) for the request, or None where it gives none."""
        busy = answer.number(BUSY_S_HEADER)
        if busy is not None:
            self._busy_changed()  # u(t) up to now as it stood
            if b.busy_s is not None and b.in_rotation and busy > b.busy_s:
                self._busy_area += (busy - b.busy_s) / len(self._ready)
            b.busy_s = busy if b.busy_s is None else max(b.busy_s, busy)
            self._busy_changed()  # from now on without its in-flight count
            if self.mesh is not None:
                self.mesh.replica(self.workload, b.replica, self.profile.capacity).reported(busy)
        return answer.number(SERVER_MS_HEADER)

    def sample(self) -> None:
        # Time-weighted over the interval: one instantaneous reading per interval aliases with
        # constant-rate clients (each sample lands at the same phase of the arrivals). Divided by
        # the replicas ready at each instant, not by those at the interval's end: a scale-up in
        # the interval does not spread the time before it over the new replica.
        self._busy_changed()
        ready = self.rotation()
        util = self._busy_area / self._ready_time if self._ready_time > 0 else 0.0
        tick = self.collector.sample([b.in_flight for b in ready], utilization=min(util, 1.0),
                                     ready_s=self._ready_time)
        self._busy_area = self._ready_time = 0.0
        self.metrics.utilization.labels(self.service).set(tick.utilization)

    def window(self, seconds: float) -> WindowMetrics:
        return self.collector.window(seconds, [b.in_flight for b in self.rotation()], self.waiting())

    def waiting(self) -> int:
        """Requests waiting at the replicas now: sum over every replica that still holds requests
        (in rotation or taken out) of max(0, in_flight - capacity)."""
        cap = self.profile.capacity
        return sum(max(0, b.in_flight - cap) for b in self.backends.values())

    async def handle(self, head: Head, body: bytes, upload_s: float,
                     client_gone: Callable[[], bool]) -> bytes | None:
        """Forward one request (its head, body, and the seconds its upload took since its head
        arrived, when `on_arrival` counted it) to a replica in rotation and return the answer's
        bytes for the client: the replica's, or 503 (none ready), 502 (its connection lost),
        504 (it took longer than the upstream timeout). A refused connection takes the replica
        out of rotation and tries the next."""
        start = time.monotonic() - upload_s
        upload_ms = upload_s * 1000.0
        method, target = head.line[0], head.line[1]
        headers = head.without(HOP_BY_HOP)
        status, reason = 0, ""
        served_by = ""  # the replica that answered; none for "no replica" (the mesh's pod label)
        server_ms: float | None = None
        answer: bytes
        tried: set[str] = set()
        while True:
            b = self._pick()
            if b is None or b.replica in tried:
                status, reason, served_by = 503, "no_replica", ""
                answer = _json_answer(503, {"error": f"no ready replica of {self.service}"}, head)
                break
            tried.add(b.replica)
            gauge, meter = self._sent_to(b)
            try:
                up, data = await self._pool.exchange(b.url, method, target, headers, body,
                                                     self.upstream_timeout_s)
                status = int(up.line[1])
                out = up.without(HOP_BY_HOP)
                answer = response(status, out, data, close=not head.keep_alive)
                server_ms = self._replica_reported(b, up)
                reason = "" if status < 400 else ("dropped" if status == 503 else f"http_{status // 100}xx")
                break
            except Refused:
                # Nothing was sent: the replica is gone. Take it out and try the next one.
                self._replica_failed(b, "connect")
                continue
            except Dropped:
                self._replica_failed(b, "reset")
                status, reason = 502, "upstream_error"
                answer = _json_answer(502, {"error": "replica connection lost"}, head)
                break
            except (TimeoutError, asyncio.TimeoutError):
                status, reason = 504, "timeout"
                answer = _json_answer(504, {"error": "replica timed out"}, head)
                break
            finally:
                b.in_flight -= 1
                self._busy_changed()
                gauge.dec()
                if meter is not None:
                    meter.finished()
                    served_by = b.replica
                self._forget_if_idle(b)
        latency_ms = (time.monotonic() - start) * 1000.0
        lost = client_gone()
        if lost:
            self._lost("while waiting for the response")
        self._answered(status, reason, served_by, latency_ms, (upload_ms, server_ms))
        return None if lost else answer

    def _sent_to(self, b: Backend) -> tuple[Any, Any]:
        """A request now in flight at replica `b`: its count and gauge up, the mesh's meter (if
        any) started; returns the gauge and the meter (None without a mesh)."""
        b.in_flight += 1
        self._busy_changed()
        gauge = b.gauge or self.metrics.in_flight.labels(self.service, b.replica)
        b.gauge = gauge  # the labelled child, looked up once per replica
        gauge.inc()
        meter = (self.mesh.replica(self.workload, b.replica, self.profile.capacity)
                 if self.mesh is not None else None)
        if meter is not None:
            meter.started()
        return gauge, meter

    def _answered(self, status: int, reason: str, served_by: str, latency_ms: float,
                  parts_ms: tuple[float, float | None]) -> None:
        """One answered request in the window, the metrics and the mesh: `latency_ms` since its
        head arrived, `parts_ms` its upload's and the replica's own (None: not reported)."""
        upload_ms, server_ms = parts_ms
        if self.clock.compresses(latency_ms, server_ms):
            # the window's latency as the client records it (ScenarioClock.scenario_ms_of): the
            # replica's time compressed, the rest (network, balancer) at its real duration; here
            # in wall time against the compressed SLO, so the rest counts divided by the scale
            latency_ms = self.clock.compressed(latency_ms, server_ms)  # type: ignore[arg-type]
            upload_ms = self.clock.wall(upload_ms)  # the network's part, as the rest
        violated = self.collector.completion(latency_ms, ok=status < 400, dropped=status == 503,
                                             upload_ms=upload_ms)
        if violated:
            why = reason or "slow"
            if why not in self._violations_by_reason:
                self._violations_by_reason[why] = self.metrics.violations.labels(self.service, why)
            self._violations_by_reason[why].inc()
        if status not in self._requests_by_status:
            self._requests_by_status[status] = self.metrics.requests.labels(self.service, str(status))
        self._requests_by_status[status].inc()
        self._duration.observe(latency_ms / 1000.0)
        if self.mesh is not None:
            self.mesh.finished(self.workload, served_by, status, latency_ms)

    def _lost(self, when: str) -> None:
        """A client connection closed `when` (while sending, while waiting): counted, one line."""
        self.lost_connections += 1
        self.metrics.lost.labels(self.service).inc()
        if self.on_lost is not None:
            self.on_lost(self.service, when)

    def _replica_failed(self, b: Backend, how: str) -> None:
        if b.in_rotation:
            log.warning("%s replica %s failed (%s); taken out of rotation", self.service, b.replica, how)
            self.take_out(b.replica)
            if self.on_failure is not None:
                self.on_failure(self.service, b.replica)


def _json_answer(status: int, obj: dict[str, Any], head: Head) -> bytes:
    """The balancer's own answer (no replica, a lost or slow one) as a JSON response."""
    return response(status, [("Content-Type", "application/json; charset=utf-8")],
                    json.dumps(obj).encode(), close=not head.keep_alive)
