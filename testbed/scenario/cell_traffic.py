"""A cell's traffic: what each client sends (its LoadJob, in wall seconds), the iperf3
cross-traffic, and the gate at which the clients begin their schedules together."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from testbed.clock import ScenarioClock
from testbed.load.gate import open_gate, ready_at_gate
from testbed.load.traffic import IperfJob, LoadJob
from testbed.scenario.backends import CellBackends
from testbed.scenario.spec import ClientSpec, Scenario, trace_dir


def load_job(scn: Scenario, client: ClientSpec, index: int, rep: int, base_dir: Path) -> LoadJob:
    """What client `index` of the scenario sends in repetition `rep`, in wall seconds: its
    trace or rate over the warm-up and then the measured window, time-scaled.

    scn: the cell's scenario; client: its entry; base_dir: the scenario's folder."""
    scale = ScenarioClock(scn.time_scale)
    # the clients' clock: the run's, or, read the DRAFAS way, slower by its client's drift (the
    # author's client sleeps each trace line's second and never reads a clock: its seconds slide
    # against Prometheus's scrapes, testbed.sim.measure.MEASURES)
    clients = ScenarioClock(scale.scale / (1.0 + scn.client_drift))
    warm = scn.warmup_s
    seconds = scn.duration_s + warm
    seed = scn.seed + 1000 * rep + index
    # errors are the service's, judged by the expectations: the client never fails on them
    fresh = client.connections == "per-request"
    profiles = (base_dir / scn.service_profiles).resolve() if scn.service_profiles else None
    if client.trace:
        return LoadJob(service=client.service, timeout_s=scale.wall(client.timeout_s), seed=seed,
                       max_error_rate=1.0, new_connections=fresh, profiles=profiles,
                       trace=trace_dir(scn, base_dir) / client.trace,
                       trace_time_unit=scn.trace_units.time, trace_rate_unit=scn.trace_units.rate,
                       ratio=client.ratio,
                       shift_hours=client.shift_hours,
                       start_s=client.start_s - warm,  # the warm-up replays the trace before the window
                       duration_s=seconds, speedup=clients.scale)
    assert client.rate is not None  # a client has a trace or a rate (checked at load)
    return LoadJob(service=client.service, timeout_s=scale.wall(client.timeout_s), seed=seed,
                   max_error_rate=1.0, new_connections=fresh, profiles=profiles,
                   rate=clients.wall_rate(client.rate), duration_s=clients.wall(seconds))


def iperf_jobs(scn: Scenario, iperf_dir: Path, wall: float) -> list[IperfJob]:
    """The iperf3 cross-traffic of a cell of `scn`, each flow lasting `wall` seconds plus one, its
    results in `iperf_dir`."""
    return [IperfJob(slice=x.slice, flows=x.flows, duration_s=max(1.0, wall + 1),
                     reverse=x.direction == "downlink",
                     out=iperf_dir / f"{x.slice}-{x.direction}.json")
            for x in scn.cross_traffic if x.flows > 0]


async def open_gate_when_ready(b: CellBackends, gate: Path, clients: int, timeout_s: float,
                               problem: Callable[[str], None]) -> float:
    """Wait until the `clients` are ready at `gate` (or `timeout_s`, one `problem` of the cell),
    open it `b.client_start_s` from now; return that epoch second."""
    deadline = b.clock.monotonic() + timeout_s
    while ready_at_gate(gate) < clients and b.clock.monotonic() < deadline:
        if not b.traffic.clients_running():
            break
        await b.clock.sleep(0.01)
    if ready_at_gate(gate) < clients:
        problem(f"{clients - ready_at_gate(gate)} of {clients} clients not ready within "
                f"{timeout_s:g} s; the others began without them")
    start_at = b.clock.time() + (b.client_start_s or 0.0)
    open_gate(gate, start_at)
    return start_at
