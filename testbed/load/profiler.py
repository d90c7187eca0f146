"""Service profiling as in dissertation Section 4.4.2: processing-time range from closed-loop
requests, capacity from a rate sweep, startup time by scaling a cluster backend up by one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from testbed.cluster.base import ClusterBackend
from testbed.errors import StateError
from testbed.load.client import ClientConfig, LoadClient
from testbed.load.records import RequestRecord
from testbed.load.stats import percentile
from testbed.load.trace import constant_schedule
from testbed.profiles import ServiceProfile

Progress = Callable[[str], None]


@dataclass
class ProfileResult:
    """What `testbed profile` measured of a service: its closed-loop processing times, the offered-
    vs-achieved sweep, the capacity it derived and its start-up time."""
    service: str
    proc_ms: list[float] = field(default_factory=list)  # closed-loop latencies of successful requests
    sweep: list[tuple[float, float]] = field(default_factory=list)  # (offered req/s, achieved ok/s)
    capacity: int = 1
    startup_ms: float | None = None

    @property
    def proc_range_ms(self) -> tuple[float, float]:
        """5th to 95th percentile: the range the emulated replicas draw from (outliers cut)."""
        s = sorted(self.proc_ms)
        return (percentile(s, 0.05) or 0.0, percentile(s, 0.95) or 0.0)

    def to_profile(self, base: ServiceProfile) -> ServiceProfile:
        """`base` (defaults or a previous profile) with the measured fields replaced."""
        upd: dict[str, object] = {
            "proc_time_ms": tuple(round(x, 1) for x in self.proc_range_ms),
            "capacity": self.capacity,
        }
        if self.startup_ms is not None:
            upd["startup_ms"] = round(self.startup_ms)
        measured = base.replace(**upd)
        sources = {k: f"measured by `testbed profile {self.service}`" for k in upd}
        return measured.replace(sources={**measured.sources, **sources})


async def measure_processing(
    service: str, url: str, requests: int = 50, timeout_s: float = 30.0, source_address: str | None = None
) -> list[float]:
    """Send `requests` one after another (each when the last returned): no queueing time.

    service: the service's name; url: its endpoint; timeout_s: per request; source_address: the
    local address to bind."""
    records: list[RequestRecord] = []
    cfg = ClientConfig(service, url, timeout_s=timeout_s,
                       source_addresses=(source_address,) if source_address else ())
    async with LoadClient(cfg, [records.append]) as client:
        await client.run_closed_loop(workers=1, requests=requests)
    ok = [r.latency_ms for r in records if r.ok]
    if len(ok) < max(1, requests // 2):
        kinds = sorted({r.error for r in records if r.error})
        raise StateError(f"{service} at {url}: only {len(ok)} of {requests} requests succeeded ({kinds})")
    return ok


async def measure_capacity(
    service: str,
    url: str,
    mean_proc_ms: float,
    factors: tuple[float, ...] = (0.5, 1, 1.5, 2, 3, 4, 6, 8),
    step_s: float = 5.0,
    timeout_s: float = 30.0,
    progress: Progress | None = None,
    source_address: str | None = None,
) -> tuple[int, list[tuple[float, float]]]:
    """Offer rates at multiples of one replica-slot's throughput (1000/mean_proc_ms req/s) and
    take capacity = the best achieved throughput × the mean processing time (requests in parallel).

    service, url: as above; factors: the offered rates as multiples of one slot's throughput;
    step_s: seconds per rate; timeout_s: per request; progress: called per step; source_address: the
    local address to bind."""
    base_rate = 1000.0 / max(mean_proc_ms, 1e-3)
    sweep: list[tuple[float, float]] = []
    best = 0.0
    for f in factors:
        rate = base_rate * f
        records: list[RequestRecord] = []
        cfg = ClientConfig(service, url, timeout_s=timeout_s,
                       source_addresses=(source_address,) if source_address else ())
        async with LoadClient(cfg, [records.append]) as client:
            await client.run_open_loop(constant_schedule(rate, step_s))
        ok = [r for r in records if r.ok]
        if ok:
            span = max(r.sent + r.latency_ms / 1000 for r in ok) - min(r.sent for r in ok)
            achieved = len(ok) / max(span, step_s)
        else:
            achieved = 0.0
        sweep.append((rate, achieved))
        if progress:
            progress(f"offered {rate:.1f} req/s, achieved {achieved:.1f} ok/s")
        best = max(best, achieved)
        if achieved < 0.8 * rate and len(sweep) >= 2 and achieved <= 1.05 * sweep[-2][1]:
            break  # saturated: more offered load no longer raises throughput
    return max(1, round(best * mean_proc_ms / 1000.0)), sweep


async def measure_startup(
    backend: ClusterBackend, service: str, timeout_s: float = 300.0, poll_s: float = 0.02
) -> float:
    """Scale `service` up by one, time until one more replica is ready, scale back. Milliseconds.

    backend: the cluster that scales it; timeout_s: the longest wait; poll_s: how often readiness is
    checked."""
    before_desired = backend.desired_replicas(service)
    before_ready = backend.ready_replicas(service)
    t0 = time.monotonic()
    backend.scale(service, before_desired + 1)
    try:
        while backend.ready_replicas(service) <= before_ready:
            if time.monotonic() - t0 > timeout_s:
                raise StateError(f"no new {service} replica ready after {timeout_s:.0f} s")
            await asyncio.sleep(poll_s)
        return (time.monotonic() - t0) * 1000.0
    finally:
        backend.scale(service, before_desired)


async def profile_service(
    service: str,
    url: str,
    requests: int = 50,
    step_s: float = 5.0,
    backend: ClusterBackend | None = None,
    progress: Progress | None = None,
    source_address: str | None = None,
) -> ProfileResult:
    """Measure a running service for a profile: processing times, capacity and (with a `backend`)
    start-up. service: its name; url: its endpoint; requests: how many for the processing
    times; step_s: seconds per capacity step; backend: the cluster to time start-up on;
    progress: called per step; source_address: the local address to bind."""
    say = progress or (lambda _msg: None)
    result = ProfileResult(service)
    say(f"processing time: {requests} closed-loop requests")
    result.proc_ms = await measure_processing(service, url, requests, source_address=source_address)
    mean = sum(result.proc_ms) / len(result.proc_ms)
    say(f"capacity: rate sweep from {500.0 / mean:.1f} req/s")
    result.capacity, result.sweep = await measure_capacity(
        service, url, mean, step_s=step_s, progress=say, source_address=source_address
    )
    if backend is not None:
        say("startup: scaling up by one replica")
        result.startup_ms = await measure_startup(backend, service)
    return result
