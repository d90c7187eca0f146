"""Policies that decide a whole configuration (replicas, MPS share, batch, placement) instead of
DRAFAS's -2..+2: the protocol, what they see, and how a target reaches a backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from testbed.cluster.base import ClusterBackend, GpuClusterBackend, ServiceTarget
from testbed.errors import StateError
from testbed.metrics.window import WindowMetrics


@dataclass(frozen=True)
class ServiceView:
    """What a target policy sees of one service at a decision."""

    service: str
    window: WindowMetrics  # the last period
    current: ServiceTarget  # replicas (not draining), share, batch, GPUs
    share_used_pct: float  # share the service holds now (starting and old replicas included)


@dataclass(frozen=True)
class ClusterView:
    """Every service the policy controls, and the GPUs' free share."""

    services: Mapping[str, ServiceView]
    gpu_free_pct: Sequence[float]
    unit_pct: float  # DRAFAS's unit (25 %): Eq. 3.2's cost counts share in these


@runtime_checkable
class TargetPolicy(Protocol):
    """Maps the cluster view to a target per service (services it leaves out stay as they are)."""

    name: str

    def plan(self, view: ClusterView) -> dict[str, ServiceTarget]:
        """Each service's target (replicas, shares, batch) for the cluster `view` shows."""
        ...


def cluster_view(backend: ClusterBackend, windows: Mapping[str, WindowMetrics]) -> ClusterView:
    """What share and batch policies see: each service's newest window (`windows`), target and share
    used on `backend`, and each GPU's free share."""
    gpu = require_gpu_backend(backend)
    return ClusterView(
        {
            s: ServiceView(s, w, gpu.target(s), gpu.share_used_pct(s))
            for s, w in windows.items()
        },
        tuple(gpu.gpu_free_pct()),
        getattr(backend, "unit_pct", 25.0),
    )


def require_gpu_backend(backend: ClusterBackend) -> GpuClusterBackend:
    """`backend` as a GpuClusterBackend, or a StateError saying where share/batch policies run."""
    if not isinstance(backend, GpuClusterBackend):
        raise StateError(
            f"{type(backend).__name__} cannot set MPS shares or batch sizes; "
            "run share/batch policies on a GPU backend (the simulator's --gpus, the local testbed or the lab)"
        )
    return backend


def apply_target(backend: ClusterBackend, service: str, target: ServiceTarget) -> ServiceTarget:
    """Send `target` to the backend; a plain backend takes only replica counts.

    backend: the cluster; service: the one configured."""
    if isinstance(backend, GpuClusterBackend):
        return backend.configure(service, target)
    if target.batch != 1 or target.gpus is not None:
        require_gpu_backend(backend)
    backend.scale(service, target.replicas)
    return ServiceTarget(target.replicas, target.share_pct, target.batch)

