"""Gymnasium adapter: one service on the simulator as an RL environment (Section 4.4.3).

Needs `gymnasium` (the `drl` extra); the simulator itself does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np

from testbed.load.trace import Trace
from testbed.profiles import ServiceProfile, default_profiles
from testbed.profiles.paper import DEFAULT_RATIOS, HISTORY, TEST_SHIFT_HOURS, TOTAL_UNITS
from testbed.scaler.actions import ACTIONS, action_mask, adjust_action, next_cooldown, reward
from testbed.scaler.policies import Policy
from testbed.scaler.state import N_METRICS, StateBuilder
from testbed.sim.cluster import DEFAULT_OPTIONS, SimCluster
from testbed.train.episode import Episode, EpisodeDraws, Neighbours


class ScalingEnv(gym.Env):
    """Observation: 30 floats in [0, 1]; action: Discrete(5) = -2..+2 replicas; reward: Eq. 3.2.

    Each episode replays one trace (picked at random from `traces`) until it ends (truncated).
    With `randomize_free_units`, in half of the steps the free units the agent sees are drawn
    between 0 and the real free units, standing in for other services competing for the pool
    (Section 4.4.3; the published simulator draws in half of the calls, simpy_env.py:303-306).

    With `scales`, each episode draws its pool size from them and multiplies the request ratio by
    that size over `total_units`, so the load per unit stays the one of `ratio` at `total_units`
    while an instance's price in the reward (1/units) changes; the observation's unit-cost metric
    tells the agent which pool it is in.

    With `loads`, each episode at `total_units` also draws a multiplier of the ratio from them
    (Table 5.2 doubles Table 5.1's ratios); episodes at other pool sizes keep the multiplier 1.
    With `shared`, an episode at `total_units` runs the way Tables 5.1 and 5.2 do: the three
    paper services share the pool, each replaying the episode's day shifted as the test day is
    (0/8/16 h) at its default ratio times the load multiplier, the other two driven by rule v2
    and deciding in the tables' order around the agent (earlier services before it, later ones
    after it); the free units the agent sees are then the real ones, not randomised. Episodes
    at other pool sizes stay single-service. With `pool_reward` as well, the reward of a shared
    episode's step is the pool's: Eq. 3.2 of the agent plus Eq. 3.2 of the two others for the same
    period, so that holding units another service needs costs the agent what it costs the pool.
    `partners` (service -> policy) replaces rule v2 for those services in a shared episode, e.g.
    the shipped agents of the other two, so that the agent learns beside the neighbours it will
    share the pool with in the tables.

    `like_testbed`: the share of episodes whose clients and balancer run as on the local testbed
    (testbed.sim.cluster.TESTBED_OPTIONS: each second's requests from its start rather than one gap
    into it, utilization over ready replicas, counts carried), so that an agent does not learn the
    published simulator's utilization samples, which always catch the request that arrived just
    before them, as the only reading there is (docs/notes/table-5.4-runs.md).

    The per-episode draws are testbed.train.episode.EpisodeDraws; a shared episode's other two
    services are its Neighbours there.
    """

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium's convention)

    def __init__(
        self,
        service: str,
        traces: Sequence[Trace],
        ratio: float,
        *,
        total_units: int = TOTAL_UNITS,
        randomize_free_units: bool = True,
        profile: ServiceProfile | None = None,
        scales: Sequence[int] | None = None,
        loads: Sequence[float] | None = None,
        shared: bool = False,
        pool_reward: bool = False,
        partners: Mapping[str, Policy] | None = None,
        like_testbed: float = 0.0,
    ):
        super().__init__()
        self.options = DEFAULT_OPTIONS
        self.service = service
        self.traces = list(traces)
        self.ratio = ratio
        self.total_units = total_units
        self.base_units = total_units
        self.randomize_free_units = randomize_free_units
        self.draws = EpisodeDraws(
            total_units, list(scales) if scales else None, list(loads) if loads else None, like_testbed
        )
        self.load = 1.0
        self.shared = shared
        self.pool_reward = pool_reward
        self.partners = dict(partners or {})
        self._others_reward = 0.0
        self._neighbours: Neighbours | None = None
        self.profile = profile or default_profiles()[service]
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(N_METRICS * HISTORY,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(len(ACTIONS))
        self._cluster: SimCluster | None = None
        self._state = StateBuilder.for_profile(self.profile)
        self._mask = (0, 0, 1, 0, 0)
        self._cooldown = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        episode = self.draws.draw(self.np_random, self.traces)
        self.total_units, self.load, self.options = episode.units, episode.load, episode.options
        ratio = self.ratio * self.load * self.total_units / self.base_units
        self._neighbours = None
        if self.shared and self.total_units == self.base_units:
            self._cluster = shared_cluster(self.service, self.profile, episode, ratio)
            self._neighbours = Neighbours(self._cluster, self.service, self.partners)
        else:
            self._cluster = SimCluster(
                {self.service: self.profile},
                {self.service: episode.trace},
                {self.service: ratio},
                total_units=self.total_units,
                seed=episode.seed,
                options=self.options,
            )
        self._state.reset()
        self._cooldown = 0
        window = self._advance()
        obs = self._observe(window)
        return obs, {}

    def _advance(self):
        """One period, then the neighbours that decide before the agent (the tables' order)."""
        windows = self._cluster.advance()
        if self._neighbours is not None:
            self._others_reward = self._neighbours.reward(windows, self.total_units)
            self._neighbours.decide_before()
        return windows[self.service]

    def step(self, action: int):
        cluster = self._cluster
        assert cluster is not None, "call reset() first"
        delta = adjust_action(ACTIONS[int(action)], self._mask)
        if not self._mask[delta + 2]:
            delta = 0
        if delta:
            cluster.scale(self.service, cluster.desired_replicas(self.service) + delta)
        self._cooldown = next_cooldown(self._cooldown, delta)
        if self._neighbours is not None:
            self._neighbours.decide_after()
        window = self._advance()
        r = reward(window.slo_violation_rate, cluster.desired_replicas(self.service), self.total_units)
        if self.pool_reward and self._neighbours is not None:
            r += self._others_reward
        obs = self._observe(window)
        return obs, r, False, cluster.done, {"window": window, "applied": delta}

    def action_masks(self) -> np.ndarray:
        return np.asarray(self._mask, dtype=bool)

    def _observe(self, window) -> np.ndarray:
        cluster = self._cluster
        units = cluster.units_per_replica(self.service)
        free = cluster.free_units()
        randomize = self.randomize_free_units and self._neighbours is None
        if randomize and self.np_random.random() < 0.5:
            free = int(self.np_random.integers(0, free + 1))
        n = cluster.desired_replicas(self.service)
        self._mask = action_mask(n, free, units, self._cooldown)
        return self._state.push(window, self._mask, n, free // max(units, 1), self.total_units)

    def close(self) -> None:
        self._cluster = None


def shared_cluster(
    service: str, profile: ServiceProfile, episode: Episode, ratio: float
) -> SimCluster:
    """The three paper services sharing the episode's pool as Tables 5.1 and 5.2 do: each replays
    the episode's day shifted as the test day is, `service` at `ratio`, the others at their
    default ratio times the episode's load."""
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
