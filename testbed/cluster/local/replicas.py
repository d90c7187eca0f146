"""A LocalCluster's book of replicas: each replica process's state, and what the cluster wants of
each service (replica count, MPS share, batch size)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass
class ReplicaProcess:
    service: str
    name: str
    state: str = "starting"  # starting → ready → draining → stopped; or died
    proc: asyncio.subprocess.Process | None = None
    url: str = ""
    started: float = field(default_factory=time.monotonic)
    ready_after_s: float | None = None
    task: asyncio.Task[None] | None = None
    gpu: int = 0  # which emulated GPU's share it holds
    share: float = 25.0  # MPS share, % of that GPU
    retiring: bool = False  # replaced by replicas with a new share: stops once they are ready
    stretch: float = 1.0  # 1 + interference from its GPU's neighbours (interference=True)
    told: tuple[int, float] | None = None  # (batch, stretch) the process has, as far as we know
    warm: bool = False  # ready once its server listens (an initial replica of a cell)

    @property
    def live(self) -> bool:
        return self.state in ("starting", "ready", "draining")

    @property
    def active(self) -> bool:
        """Starting or serving: counts towards the service's replicas (a draining one does not)."""
        return self.state in ("starting", "ready")


class ReplicaTable:
    """Replicas by service (live ones, plus any not yet pruned after exiting) and the service's
    wanted replica count, share and batch. All replicas of a service share its batch size."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.by_service: dict[str, list[ReplicaProcess]] = {s: [] for s in names}
        self.desired = dict.fromkeys(names, 0)
        self.share = dict.fromkeys(names, 25.0)
        self.batch = dict.fromkeys(names, 1)

    def every(self) -> list[ReplicaProcess]:
        """Every replica of every service, in service order then start order."""
        return [r for reps in self.by_service.values() for r in reps]

    def live(self) -> list[ReplicaProcess]:
        return [r for r in self.every() if r.live]

    def active(self, service: str) -> list[ReplicaProcess]:
        return [r for r in self.by_service[service] if r.active]

    def ready_count(self, service: str) -> int:
        return sum(1 for r in self.by_service[service] if r.state == "ready")

    def prune(self, service: str) -> None:
        """Forget the service's replicas that have exited."""
        self.by_service[service] = [r for r in self.by_service[service] if r.live]
