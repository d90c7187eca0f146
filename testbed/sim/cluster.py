"""Several simulated services sharing a pool of resource units; a `ClusterBackend` the scaler drives."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from testbed.errors import ConfigError, ConfigProblem, StateError
from testbed.load.trace import Trace, arrival_times
from testbed.metrics.window import WindowMetrics
from testbed.profiles import ServiceProfile, gpu_stretches
from testbed.profiles.paper import STEP_SECONDS, TOTAL_UNITS, UNIT_PCT
from testbed.sim.backend import SimBackend
from testbed.sim.measure import MEASURES, Measurement
from testbed.sim.service import SimService, StepOutcome
from testbed.sim.service_options import TestbedEffects, WindowReading


@dataclass(frozen=True)
class SimOptions:
    """Modelling choices the dissertation's text leaves open (see `bench/sim_fidelity.py`).

    Defaults follow the dissertation's published simulator (tu-nv/drafas): client counts
    truncated per interval and spread with millisecond gaps, starting instances in the
    utilization denominator, a request's SLO outcome counted in the window it finishes in.
    """

    rounding: str = "floor"  # testbed.load.trace.scaled_counts
    util_counts_starting: bool = True  # testbed.sim.window_stats.mean_utilization
    spacing: str = "ms"  # testbed.load.trace.arrival_times
    slo_counting: str = "completion"  # SimService
    util_sample_phase: float = 0.0  # s after each whole second the monitor samples (SimService)
    # a testbed's way of reading each period instead of the simulator's (testbed.sim.measure)
    measurement: Measurement | None = None
    balancing: str = "round-robin"  # or "random": each request to a ready replica at random
    # processing times stretched by InSS's interference term from the ready replicas on the same
    # GPU (each replica placed on the GPU with the most free units, a GPU = 100 / UNIT_PCT units)
    interference: bool = False


DEFAULT_OPTIONS = SimOptions()
# The local testbed's client and balancer (docs/notes/table-5.4-runs.md): counts carried to the next
# second, each second's requests from its start (not one gap into it), utilization over ready
# replicas.
TESTBED_OPTIONS = SimOptions(rounding="carry", util_counts_starting=False, spacing="even")


def with_measure(options: SimOptions, measure: str) -> SimOptions:
    """`options` reading each period the way `measure` names (testbed.sim.measure.MEASURES):
    "harness" leaves them as they are, "drafas" reads as the DRAFAS testbed's Prometheus did.
    An unknown name is a ValueError naming the known ones."""
    if measure not in MEASURES:
        raise ValueError(f"unknown way of measuring {measure!r}; known: {', '.join(MEASURES)}")
    measurement = MEASURES[measure].measurement
    return options if measurement is None else replace(options, measurement=measurement)


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
                reading=WindowReading(options.util_counts_starting, options.slo_counting,
                                      options.util_sample_phase),
                effects=TestbedEffects(options.measurement, options.balancing, options.interference),
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
        self.interference = options.interference
        if self.interference:
            for sim in self.sims.values():
                self._place(sim, sim.instances)

    def _place(self, owner: SimService, instances: list) -> None:
        """Put each of `instances` on the GPU with the most free units (Kubernetes' default
        scoring spreads pods over the nodes; each DRAFAS node holds one GPU)."""
        per_gpu = round(100.0 / UNIT_PCT)
        used = [0] * max(1, -(-self._total_units // per_gpu))
        now = self.now
        placed = {id(i) for i in instances}
        for s in self.sims.values():
            for inst in s.instances:
                if id(inst) not in placed and (inst.removed_at is None or inst.removed_at > now):
                    used[inst.gpu] += s.units
        for inst in instances:
            inst.gpu = min(range(len(used)), key=lambda g: (used[g], g))
            used[inst.gpu] += owner.units

    def _stretch(self) -> None:
        """Each replica's stretch for the period now starting, from the ready replicas beside it."""
        now = self.now
        placed = [(id(inst), inst.gpu, UNIT_PCT, sim.profile.gpu)
                  for sim in self.sims.values() for inst in sim.instances
                  if inst.ready_at <= now + 1e-9 and (inst.removed_at is None or inst.removed_at > now)]
        stretch = gpu_stretches(placed)
        for sim in self.sims.values():
            for inst in sim.instances:
                inst.stretch = stretch.get(id(inst), 1.0)

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
        before = set(map(id, sim.instances))
        sim.scale(replicas, self.now)
        if self.interference:
            self._place(sim, [i for i in sim.instances if id(i) not in before])

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
        if self.interference:
            self._stretch()
        self.last_outcome = {name: sim.advance(t0, t1) for name, sim in self.sims.items()}
        self.now = t1

