"""The `ClusterBackend` answers every simulated cluster gives alike: services, replicas, endpoints, windows.

`SimCluster` (whole units, `SimService`) and `GpuSimCluster` (GPU shares, `BatchedService`) keep
their own `scale` and unit accounting; the rest of the backend is this class.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from testbed.errors import ConfigError, ConfigProblem, StateError
from testbed.metrics.window import WindowMetrics


class ServiceSim(Protocol):
    """What the backend asks of one simulated service."""

    def desired(self) -> int: ...

    def ready(self, now: float) -> int: ...


class PeriodOutcome(Protocol):
    """What the backend reads of one service's period."""

    @property
    def window(self) -> WindowMetrics: ...


SimT = TypeVar("SimT", bound=ServiceSim)
OutcomeT = TypeVar("OutcomeT", bound=PeriodOutcome)


class SimBackend(Generic[SimT, OutcomeT]):
    """The shared part of a simulated cluster; a subclass sets `sims`, `now`, `step_seconds`,
    `_end` (the shortest trace's seconds), `last_outcome` and `source` (where errors point)."""

    sims: dict[str, SimT]
    last_outcome: dict[str, OutcomeT]
    now: float
    step_seconds: float
    source: str
    _end: float

    # -- ClusterBackend ----------------------------------------------------------------------------
    def services(self) -> list[str]:
        return list(self.sims)

    def desired_replicas(self, service: str) -> int:
        return (self.sims.get(service) or self._sim(service)).desired()  # asked on every decision

    def ready_replicas(self, service: str) -> int:
        return self._sim(service).ready(self.now)

    def endpoint(self, service: str) -> str:
        self._sim(service)
        return f"sim://{service}"

    # -- simulation ----------------------------------------------------------------------------------
    def measure_queue(self, on: bool) -> None:
        """Whether windows carry `queue_length` (default on). Off, they carry None: the queue costs
        a pass over a chunk's requests, a third of a step, and only a policy that observes its
        windows reads it (`ScalerLoop.observes`)."""
        for sim in self.sims.values():
            sim.measure_queue = on

    @property
    def done(self) -> bool:
        """True once another full period would run past the end of the shortest trace."""
        return self.now + self.step_seconds > self._end + 1e-9

    def latest_window(self, service: str) -> WindowMetrics:
        """The metrics source for `ScalerLoop`: the last period's window of `service`."""
        if service not in self.last_outcome:
            raise StateError(f"{service}: no period simulated yet")
        return self.last_outcome[service].window

    def _sim(self, service: str) -> SimT:
        try:
            return self.sims[service]
        except KeyError:
            raise ConfigError(
                [ConfigProblem(self.source, None, "service",
                               f"unknown service {service!r}; known: {', '.join(self.sims)}")]
            ) from None
