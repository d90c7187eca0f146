"""What a scenario asks of the traffic side: load clients and iperf3 flows per UE group, records back.

The runner describes each client and each iperf3 flow set as plain data (`ClientJob`,
`IperfJob`); a `TrafficBackend` places them on UEs and runs them — inside UE namespaces on the
local profile, on the lab's UE hosts inside each UE's PDU session — and brings their records
into the cell directory (`ClientJob.out`, `IperfJob.out`) when stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class ClientJob:
    """One `testbed load SERVICE` client: `args` are its load options (rate or trace, duration,
    timeout, seed) except where it runs (`--source`, `--slice`), the URL and the output file."""

    index: int
    service: str
    ue_group: str
    url: str
    out: Path  # where the records end up, in the cell directory
    args: tuple[str, ...] = ()
    trace: Path | None = None  # a trace file the client reads (`--trace`), copied where needed


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

    async def start_iperf(self, jobs: Sequence[IperfJob]) -> list[str]: ...

    async def start_clients(self, jobs: Sequence[ClientJob]) -> list[str]: ...

    def clients_running(self) -> bool:
        """Whether any client is still sending (cheap: called every tick)."""
        ...

    async def stop(self) -> list[str]:
        """Stop the clients (they flush), wait for iperf3, bring records and JSON to `out`."""
        ...
