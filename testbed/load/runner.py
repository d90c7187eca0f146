"""One load run from a spec: builds the schedule (trace, constant or closed loop), the client and
its subscribers (record file, live figures), and guarantees the records reach disk."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from testbed.load.client import ClientConfig, ClientSummary, LoadClient
from testbed.load.gate import wait_at_gate
from testbed.load.records import RecordWriter
from testbed.load.stats import LiveFigures, LiveStats, RunTotals
from testbed.load.trace import constant_schedule, load_trace, schedule_from_trace
from testbed.profiles import ServiceProfile


@dataclass
class LoadSpec:
    """What `testbed load` runs: a service's endpoint, a trace window (with ratio, shift, start,
    duration and speed-up) or a constant rate or closed-loop workers, where records go, the
    slice, the addresses to bind (requests take them in turn), timeout, seed, SLO, connections
    and profile."""
    service: str
    url: str
    trace: Path | None = None
    trace_time_unit: str | None = None  # a CSV trace's units where its header states none
    trace_rate_unit: str | None = None
    ratio: float = 1.0
    shift_hours: float = 0.0
    start_s: float = 0.0
    duration_s: float | None = None
    speedup: float = 1.0
    rate: float | None = None
    closed_workers: int | None = None
    out: Path | None = None
    slice: str | None = None
    ue_group: str | None = None
    source_addresses: tuple[str, ...] = ()
    timeout_s: float = 4.0
    seed: int = 0
    slo_ms: float = 2500.0
    keep_alive: bool = True  # False: a new connection for every request
    profile: ServiceProfile | None = None  # the service's profile (default: the registry's)
    start_at: float | None = None  # epoch seconds of the schedule's zero (default: when ready)
    start_gate: Path | None = None  # or the file that says it, once every client is ready (gate)


async def run_load(spec: LoadSpec, on_tick: Callable[[LiveFigures, int, float], None] | None = None,
                   tick_s: float = 0.5, totals: RunTotals | None = None) -> ClientSummary:
    """Run to the end of the schedule (or until cancelled); every finished or cancelled request
    is written to `spec.out`, and counted in `totals`, before this returns or raises.

    spec: what to run; on_tick: called every `tick_s` with the live figures, the requests in flight
    and the seconds elapsed; totals: run-wide counters to add to."""
    trace = (load_trace(spec.trace, time_unit=spec.trace_time_unit, rate_unit=spec.trace_rate_unit)
             if spec.trace is not None else None)  # bad trace: fail before sending
    stats = LiveStats(spec.slo_ms)
    writer = RecordWriter(spec.out) if spec.out else None
    sinks = [stats] + ([writer] if writer else []) + ([totals] if totals is not None else [])
    cfg = ClientConfig(spec.service, spec.url, slice=spec.slice, ue_group=spec.ue_group,
                       timeout_s=spec.timeout_s,
                       source_addresses=spec.source_addresses, seed=spec.seed,
                       keep_alive=spec.keep_alive, profile=spec.profile)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        async with LoadClient(cfg, sinks) as client:
            ticker = None
            if on_tick is not None:
                async def tick() -> None:
                    while True:
                        on_tick(stats.figures(), client.in_flight, loop.time() - t0)
                        await asyncio.sleep(tick_s)
                ticker = asyncio.create_task(tick())
            try:
                start_at = spec.start_at
                if spec.start_gate is not None:
                    start_at = await wait_at_gate(spec.start_gate)
                if spec.closed_workers is not None:
                    return await client.run_closed_loop(spec.closed_workers, duration_s=spec.duration_s)
                if spec.rate is not None:
                    return await client.run_open_loop(constant_schedule(spec.rate, spec.duration_s or 0.0),
                                                      start_at=start_at)
                assert trace is not None
                return await client.run_open_loop(schedule_from_trace(
                    trace, spec.ratio, spec.shift_hours, spec.start_s, spec.duration_s, spec.speedup),
                    start_at=start_at)
            finally:
                if ticker is not None:
                    ticker.cancel()
                    on_tick(stats.figures(), client.in_flight, loop.time() - t0)  # type: ignore[misc]
    finally:
        if writer is not None:
            writer.close()
