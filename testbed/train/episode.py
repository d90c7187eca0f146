"""The research options of a ScalingEnv episode: what each episode draws (pool size, load, clients)
and the neighbours that share the pool with the agent's service in a shared episode."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from testbed.load.trace import Trace
from testbed.profiles.paper import TEST_SHIFT_HOURS
from testbed.scaler.actions import reward
from testbed.scaler.loop import ScalerLoop
from testbed.scaler.policies import Policy, RuleV2
from testbed.sim.cluster import DEFAULT_OPTIONS, TESTBED_OPTIONS, SimCluster, SimOptions


@dataclass(frozen=True)
class Episode:
    """One episode's draw: the trace it replays, its pool size, its load multiplier, the
    simulator's seed and how the clients and balancer run."""

    trace: Trace
    units: int
    load: float
    seed: int
    options: SimOptions


@dataclass(frozen=True)
class EpisodeDraws:
    """What each episode draws besides its trace (ScalingEnv's `scales`, `loads`, `like_testbed`).

    The draws come from the env's generator in a fixed order (trace, pool size, load, seed,
    clients), each only where its option is set, so an option left out changes no other draw."""

    base_units: int
    scales: Sequence[int] | None = None
    loads: Sequence[float] | None = None
    like_testbed: float = 0.0

    def draw(self, rng: np.random.Generator, traces: Sequence[Trace]) -> Episode:
        trace = traces[int(rng.integers(len(traces)))]
        units = self.base_units
        if self.scales:
            units = int(self.scales[int(rng.integers(len(self.scales)))])
        load = 1.0
        if self.loads and units == self.base_units:
            load = float(self.loads[int(rng.integers(len(self.loads)))])
        seed = int(rng.integers(2**31))
        options = DEFAULT_OPTIONS
        if self.like_testbed:  # no draw at 0: runs without it keep their random streams
            testbed = self.like_testbed >= 1 or rng.random() < self.like_testbed
            options = TESTBED_OPTIONS if testbed else DEFAULT_OPTIONS
        return Episode(trace, units, load, seed, options)


class Neighbours(ScalerLoop):
    """The two other services of a shared episode, each deciding with its partner agent or rule
    v2, in the tables' order around the agent's service: those before it in TEST_SHIFT_HOURS
    decide before the agent, the later ones after it."""

    def __init__(self, cluster: SimCluster, service: str, partners: Mapping[str, Policy]):
        services = list(TEST_SHIFT_HOURS)
        others = [s for s in services if s != service]
        super().__init__(
            cluster,
            {s: partners.get(s) or RuleV2.for_service(s) for s in others},
            cluster.latest_window,
            clock=lambda: cluster.now,
        )
        mine = services.index(service)
        self.service = service
        self.before, self.after = services[:mine], services[mine + 1 :]

    def reward(self, windows: Mapping, units: int) -> float:
        """Eq. 3.2 of the other services for the period of `windows` (the pool reward's share)."""
        cluster = self.backend
        return sum(
            reward(w.slo_violation_rate, cluster.desired_replicas(s), units)
            for s, w in windows.items()
            if s != self.service
        )

    def decide_before(self) -> None:
        for s in self.before:
            self.decide(s)

    def decide_after(self) -> None:
        for s in self.after:
            self.decide(s)
