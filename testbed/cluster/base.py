"""The small protocol every replica backend (local processes, Kubernetes) implements."""

from __future__ import annotations

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
