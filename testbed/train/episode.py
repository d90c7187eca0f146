"""What a ScalingEnv episode is made of: its draw (trace, pool size, load, clients) and, in a
shared episode, the pool of the three paper services and the neighbours deciding around the agent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from testbed.load.trace import Trace
from testbed.profiles import ServiceProfile, default_profiles
from testbed.profiles.paper import DEFAULT_RATIOS, TEST_SHIFT_HOURS
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


def draw_episode(
    rng: np.random.Generator,
    traces: Sequence[Trace],
    base_units: int,
    *,
    scales: Sequence[int] | None = None,
    loads: Sequence[float] | None = None,
    mixed: SimOptions = TESTBED_OPTIONS,
    mixed_share: float = 0.0,
) -> Episode:
    """One episode drawn from `rng`: a trace of `traces`, a pool size of `scales` (`base_units`
    without), a load multiplier of `loads` where the pool is `base_units` (1 otherwise), the
    simulator's seed, and the simulator options `mixed` (the local testbed's clients and balancer
    by default: testbed.sim.cluster.TESTBED_OPTIONS) in a share `mixed_share` of episodes (the
    published simulator's in the others).

    The draws come in a fixed order (trace, pool size, load, seed, clients), each only where its
    option is set, so an option left out changes no other draw."""
    trace = traces[int(rng.integers(len(traces)))]
    units = base_units
    if scales:
        units = int(scales[int(rng.integers(len(scales)))])
    load = 1.0
    if loads and units == base_units:
        load = float(loads[int(rng.integers(len(loads)))])
    seed = int(rng.integers(2**31))
    options = DEFAULT_OPTIONS
    if mixed_share:  # no draw at 0: runs without it keep their random streams
        options = mixed if mixed_share >= 1 or rng.random() < mixed_share else DEFAULT_OPTIONS
    return Episode(trace, units, load, seed, options)


def shared_cluster(
    service: str, profile: ServiceProfile, episode: Episode, ratio: float
) -> SimCluster:
    """The three paper services sharing the episode's pool as Tables 5.1 and 5.2 do: each replays
    the episode's day shifted as the test day is, `service` (with `profile`) at `ratio`, the
    others at their default ratio times the episode's load."""
    services = list(TEST_SHIFT_HOURS)
    profiles = default_profiles()
    return SimCluster(
        {s: profile if s == service else profiles[s] for s in services},
        {s: episode.trace.window(TEST_SHIFT_HOURS[s]) for s in services},
        {s: ratio if s == service else DEFAULT_RATIOS[s] * episode.load for s in services},
        total_units=episode.units,
        seed=episode.seed,
        options=episode.options,
    )


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
        """Eq. 3.2 of the other services for the period of `windows`, in a pool of `units` (the
        pool reward's share)."""
        cluster = self.backend
        return sum(
            reward(w.slo_violation_rate, cluster.desired_replicas(s), units)
            for s, w in windows.items()
            if s != self.service
        )

    def decide_before(self) -> None:
        """The services before the agent's in the tables' order decide."""
        for s in self.before:
            self.decide(s)

    def decide_after(self) -> None:
        """The services after the agent's in the tables' order decide."""
        for s in self.after:
            self.decide(s)
