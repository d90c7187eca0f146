"""What a scenario asks of the traffic side: load clients and iperf3 flows per UE group, records back.

The runner describes each client and each iperf3 flow set as plain data (`LoadJob` in a
`ClientJob`, `IperfJob`); a `TrafficBackend` places them on UEs and runs them — inside UE
namespaces on the local profile, on the lab's UE hosts inside each UE's PDU session — and brings
their records into the cell directory (`ClientJob.out`, `IperfJob.out`) when stopped. The
`testbed load` arguments of a client are written here only (`LoadJob.options`,
`ClientJob.load_argv`), whichever backend starts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from testbed.load.trace import constant_schedule, load_trace, schedule_from_trace


def _as_parsed(x: float) -> float:
    """The value a client parses from the argument `LoadJob.options` writes for `x`."""
    return float(f"{x:g}")


@dataclass(frozen=True)
class LoadJob:
    """What one `testbed load SERVICE` client sends: a constant `rate` (req/s) for `duration_s`
    seconds, or, without a rate, `trace` replayed (`ratio`, `shift_hours`, `start_s` and
    `duration_s` in trace seconds, `speedup` times faster); with its request timeout and seed."""

    service: str
    duration_s: float
    timeout_s: float = 4.0
    seed: int = 0
    max_error_rate: float = 0.1  # the share of failed requests past which the client exits 3
    rate: float | None = None
    trace: Path | None = None
    trace_time_unit: str | None = None  # a CSV trace's units where its header states none
    trace_rate_unit: str | None = None
    ratio: float = 1.0
    shift_hours: float = 0.0
    start_s: float = 0.0
    speedup: float = 1.0
    new_connections: bool = False  # a new connection for every request, not keep-alive ones
    profiles: Path | None = None  # the scenario's profile file: the service's request and SLO
    start_at: float | None = None  # epoch seconds of its schedule's zero, shared by a cell's clients
    start_gate: Path | None = None  # or the gate file that gives it once all are ready (load.gate)

    def options(self) -> tuple[str, ...]:
        """Its `testbed load` options except the trace file (`--trace`, copied where needed)."""
        args = ["--timeout", f"{self.timeout_s:g}", "--seed", str(self.seed),
                "--max-error-rate", f"{self.max_error_rate:g}"]
        if self.start_at is not None:
            args += ["--start-at", f"{self.start_at:.6f}"]
        if self.start_gate is not None:
            args += ["--start-gate", str(self.start_gate)]
        if self.new_connections:
            args.append("--new-connections")
        if self.rate is None:
            for option, unit in (("--trace-time-unit", self.trace_time_unit),
                                 ("--trace-rate-unit", self.trace_rate_unit)):
                if unit is not None:
                    args += [option, unit]
            args += ["--ratio", f"{self.ratio:g}", "--shift", f"{self.shift_hours:g}",
                     "--start", f"{self.start_s:g}", "--duration", f"{self.duration_s:g}",
                     "--speedup", f"{self.speedup:g}"]
        else:
            args += ["--rate", f"{self.rate:g}", "--duration", f"{self.duration_s:g}"]
        return tuple(args)

    def offsets(self) -> list[float]:
        """When the client sends each request (wall seconds from its start), from the values it
        parses from `options()`, as the client itself schedules them."""
        if self.rate is not None:
            return list(constant_schedule(_as_parsed(self.rate), _as_parsed(self.duration_s)))
        if self.trace is None:
            raise ValueError(f"a {self.service} load job needs a rate or a trace")
        return list(schedule_from_trace(
            load_trace(self.trace, time_unit=self.trace_time_unit,
                       rate_unit=self.trace_rate_unit), _as_parsed(self.ratio), _as_parsed(self.shift_hours),
            _as_parsed(self.start_s), _as_parsed(self.duration_s), _as_parsed(self.speedup)))


@dataclass(frozen=True)
class ClientJob:
    """One `testbed load SERVICE` client: `args` are its load options (`LoadJob.options()`:
    rate or trace, duration, timeout, seed) except where it runs (`--source` for each UE of its
    group, `--slice`), the URL and the output file."""

    index: int
    service: str
    ue_group: str
    url: str
    out: Path  # where the records end up, in the cell directory
    args: tuple[str, ...] = ()
    trace: Path | None = None  # a trace file the client reads (`--trace`), copied where needed
    profiles: Path | None = None  # the scenario's profile file (`--profiles`), copied where needed

    @classmethod
    def of(cls, load: LoadJob, *, index: int, ue_group: str, url: str, out: Path) -> ClientJob:
        """The client that runs `load` against `url`, numbered `index` in its cell.

        load: what it sends; index: its number in the cell; ue_group: the UE group it runs in; url:
        the service's endpoint; out: its records file."""
        return cls(index=index, service=load.service, ue_group=ue_group, url=url, out=out,
                   args=load.options(), trace=load.trace, profiles=load.profiles)

    def load_argv(self, *, out: str, slice: str, sources: Sequence[str], trace: str | None,
                  profiles: str | None = None, ue_group: str | None = None) -> list[str]:
        """The arguments after `testbed load` on UEs of `slice` at `sources` (its requests take
        them in turn): records to `out`, no live view, and the trace file and profile file where
        that host reads them.

        out, slice, sources, trace: as said; profiles: the profile file to pass; ue_group: the
        UEs' group, recorded with each request."""
        argv = [self.service, "--url", self.url, "--out", out, "--quiet", "--slice", slice,
                *(arg for source in sources for arg in ("--source", source)),
                *(["--ue-group", ue_group] if ue_group is not None else []), *self.args]
        if trace is not None:
            argv += ["--trace", trace]
        if profiles is not None:
            argv += ["--profiles", profiles]
        return argv


@dataclass(frozen=True)
class IperfJob:
    """`flows` parallel iperf3 TCP flows from a UE of `slice` for `duration_s` (downlink: -R)."""

    slice: str
    flows: int
    duration_s: float
    reverse: bool
    out: Path  # iperf3's JSON, in the cell directory
    ue_index: int = 1
    extra: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class TrafficBackend(Protocol):
    """Starts and stops clients and iperf3 for UE groups; every method returns the problems it
    met (one line each) instead of raising, so one failed flow does not lose the cell."""

    async def start_iperf(self, jobs: Sequence[IperfJob]) -> list[str]:
        """Start each of `jobs`' iperf3 flows in its slice's UE group."""
        ...

    async def start_clients(self, jobs: Sequence[ClientJob]) -> list[str]:
        """Start each of `jobs`' load clients in its UE group."""
        ...

    def clients_running(self) -> bool:
        """Whether any client is still sending (cheap: called every tick)."""
        ...

    async def stop(self) -> list[str]:
        """Stop the clients (they flush), wait for iperf3, bring records and JSON to `out`."""
        ...
