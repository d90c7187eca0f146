"""The small protocol every replica backend (local processes, Kubernetes) implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@runtime_checkable
class ClusterBackend(Protocol):
    """Replicas of named services sharing a pool of resource units (MPS vGPUs in the paper).

    Calls are synchronous and return quickly: `scale` starts or stops replicas and returns;
    readiness is observed through `ready_replicas`.
    """

    def services(self) -> list[str]: ...

    def desired_replicas(self, service: str) -> int: ...

    def ready_replicas(self, service: str) -> int: ...

    def scale(self, service: str, replicas: int) -> None: ...

    def units_per_replica(self, service: str) -> int: ...

    def total_units(self) -> int: ...

    def free_units(self) -> int: ...

    def endpoint(self, service: str) -> str:
        """Base URL clients use for the service (its load balancer)."""
        ...


@dataclass(frozen=True)
class ServiceTarget:
    """What a scaler asks of one service: how many replicas, each with which MPS share (% of one
    GPU), batch size and GPU. DRAFAS's -2..+2 action is the special case "replicas +- k, share and
    batch unchanged" (`ServiceTarget.scaled`); `gpus=None` lets the backend place new replicas.
    """

    replicas: int
    share_pct: float = 25.0
    batch: int = 1
    gpus: tuple[int, ...] | None = None  # one GPU per replica (placement); None = backend's choice

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        out = []
        if self.replicas < 1:
            out.append(f"replicas must be >= 1, got {self.replicas}")
        if not 0 < self.share_pct <= 100:
            out.append(f"share_pct must be in (0, 100], got {self.share_pct:g}")
        if self.batch < 1:
            out.append(f"batch must be >= 1, got {self.batch}")
        if self.gpus is not None and len(self.gpus) != self.replicas:
            out.append(f"gpus names {len(self.gpus)} GPUs for {self.replicas} replicas")
        return out

    def scaled(self, replicas: int) -> ServiceTarget:
        """The same share and batch with another replica count (DRAFAS's action)."""
        return ServiceTarget(replicas, self.share_pct, self.batch)


@runtime_checkable
class GpuClusterBackend(ClusterBackend, Protocol):
    """A backend whose replicas have an MPS share, a batch size and a GPU (simulator, local, lab).

    `configure` applies a ServiceTarget (or as much of it as fits: it returns what it applied);
    a share change restarts the service's replicas (the new ones start while the old ones serve).
    """

    def target(self, service: str) -> ServiceTarget: ...

    def configure(self, service: str, target: ServiceTarget) -> ServiceTarget: ...

    def gpu_free_pct(self) -> list[float]:
        """Free share (%) of each GPU."""
        ...

    def share_used_pct(self, service: str) -> float:
        """Share (%, summed over GPUs) the service's replicas hold now."""
        ...
