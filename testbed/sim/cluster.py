"""Several simulated services sharing a pool of resource units; a `ClusterBackend` the scaler drives."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from testbed.errors import ConfigError, ConfigProblem, StateError
from testbed.load.trace import Trace, arrival_times
from testbed.metrics.window import WindowMetrics
from testbed.profiles import ServiceProfile
from testbed.profiles.paper import STEP_SECONDS, TOTAL_UNITS
from testbed.sim.backend import SimBackend
from testbed.sim.service import SimService, StepOutcome


@dataclass(frozen=True)
class SimOptions:
    """Modelling choices the dissertation's text leaves open (see `bench/sim_fidelity.py`).

    Defaults follow the dissertation's published simulator (tu-nv/drafas): client counts
    truncated per interval and spread with millisecond gaps, starting instances in the
    utilization denominator, a request's SLO outcome counted in the window it finishes in.
    """

    rounding: str = "floor"  # testbed.load.trace.scaled_counts
    util_counts_starting: bool = True  # SimService._utilization
    spacing: str = "ms"  # testbed.load.trace.arrival_times
    slo_counting: str = "completion"  # SimService
    util_sample_phase: float = 0.0  # s after each whole second the monitor samples (SimService)


DEFAULT_OPTIONS = SimOptions()
# The local testbed's client and balancer (docs/notes/table-5.4-runs.md): counts carried to the next
# second, each second's requests from its start (not one gap into it), utilization over ready
# replicas.
TESTBED_OPTIONS = SimOptions(rounding="carry", util_counts_starting=False, spacing="even")


class SimCluster(SimBackend[SimService, StepOutcome]):
    """Services fed by trace-replaying clients; `advance()` simulates one scaler period.

    Implements `testbed.cluster.base.ClusterBackend`, so `ScalerLoop` drives it exactly as it
    drives local replicas or Kubernetes.
    """

    source = "<sim>"

    def __init__(
        self,
        profiles: Mapping[str, ServiceProfile],
        traces: Mapping[str, Trace],
        ratios: Mapping[str, float],
        *,
        total_units: int = TOTAL_UNITS,
        seed: int = 0,
        step_seconds: float = STEP_SECONDS,
        exact: bool = False,
        options: SimOptions = DEFAULT_OPTIONS,
    ):
        missing = [name for name in profiles if name not in traces or name not in ratios]
        if missing:
            raise ConfigError(
                [ConfigProblem("<sim>", None, name, "no trace or ratio given") for name in missing]
            )
        self._total_units = total_units
        self.step_seconds = step_seconds
        self.now = 0.0
        rngs = np.random.SeedSequence(seed).spawn(len(profiles))
        self.sims: dict[str, SimService] = {}
        self._end = np.inf
        for (name, profile), child in zip(profiles.items(), rngs, strict=True):
            arrivals = arrival_times(traces[name], ratios[name], options.rounding, options.spacing)
            self.sims[name] = SimService(
                profile,
                arrivals,
                np.random.default_rng(child),
                exact=exact,
                util_counts_starting=options.util_counts_starting,
                slo_counting=options.slo_counting,
                util_sample_phase=options.util_sample_phase,
            )
            self._end = min(self._end, traces[name].seconds)
        used = sum(s.units_in_use(self.now) for s in self.sims.values())
        if used > total_units:
            raise ConfigError(
                [
                    ConfigProblem(
                        "<sim>",
                        None,
                        "total_units",
                        f"initial instances need {used} units, only {total_units}",
                    )
                ]
            )
        self.last_outcome: dict[str, StepOutcome] = {}

    # -- ClusterBackend ----------------------------------------------------------------------------
    def scale(self, service: str, replicas: int) -> None:
        sim = self._sim(service)
        if replicas < 1:
            raise StateError(f"{service}: cannot scale below one replica (asked {replicas})")
        extra = (replicas - sim.desired()) * sim.profile.units
        if extra > self.free_units():
            raise StateError(
                f"{service}: {replicas} replicas need {extra} more units, {self.free_units()} free"
            )
        sim.scale(replicas, self.now)

    def units_per_replica(self, service: str) -> int:
        sim = self.sims.get(service) or self._sim(service)  # asked on every decision
        return sim.units

    def total_units(self) -> int:
        return self._total_units

    def free_units(self) -> int:
        used, now = 0, self.now
        for s in self.sims.values():
            used += s.units_in_use(now)
        return self._total_units - used

    # -- simulation ----------------------------------------------------------------------------------
    def advance(self) -> dict[str, WindowMetrics]:
        """Simulate one period for every service; returns each service's window."""
        self.simulate()
        return {name: out.window for name, out in self.last_outcome.items()}

    def simulate(self) -> None:
        """`advance` for a caller that reads `last_outcome` (the evaluator): no windows' dict."""
        t0, t1 = self.now, self.now + self.step_seconds
        self.last_outcome = {name: sim.advance(t0, t1) for name, sim in self.sims.items()}
        self.now = t1

