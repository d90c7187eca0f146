"""Gymnasium adapter: one service on the simulator as an RL environment (Section 4.4.3).

Needs `gymnasium` (the `drl` extra); the simulator itself does not. The research options of
training (per-episode draws, the shared pool, the pool's reward, randomised free units) are
wrappers around it that pass what an episode needs through `reset(options=...)`:
testbed.train.wrappers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import gymnasium as gym
import numpy as np

from testbed.load.trace import Trace
from testbed.metrics.window import WindowMetrics
from testbed.profiles import ServiceProfile, default_profiles
from testbed.profiles.paper import HISTORY, TOTAL_UNITS
from testbed.scaler.actions import ACTIONS, action_mask, adjust_action, next_cooldown, reward
from testbed.scaler.state import N_METRICS, StateBuilder
from testbed.sim.cluster import DEFAULT_OPTIONS, SimCluster
from testbed.train.episode import Episode, draw_episode


class EpisodeDraw(Protocol):
    """Draws an episode of `env` from `rng`, the env's generator just after it was seeded."""

    def __call__(self, rng: np.random.Generator, env: ScalingEnv) -> Episode: ...


class PoolNeighbours(Protocol):
    """The services sharing an episode's pool with the agent's (testbed.train.episode.Neighbours):
    their Eq. 3.2 for a period, and their decisions before and after the agent's."""

    def reward(self, windows: Mapping[str, WindowMetrics], units: int) -> float:
        """Their Eq. 3.2 for the period of `windows` (service -> its window), in a pool of `units`."""
        ...

    def decide_before(self) -> None:
        """Those that decide before the agent in a period do."""
        ...

    def decide_after(self) -> None:
        """Those that decide after the agent in a period do."""
        ...


class PoolSetup(Protocol):
    """Opens an episode's cluster with the services sharing its pool, or None where the agent's
    service runs alone in that episode."""

    def open(
        self, env: ScalingEnv, episode: Episode, ratio: float
    ) -> tuple[SimCluster, PoolNeighbours] | None:
        """The cluster of `env`'s `episode` (its service at `ratio`) and its neighbours, or None."""
        ...


class FreeUnitsView(Protocol):
    """The free units the agent sees (and its action mask follows) when the real ones are `free`;
    it may draw from `rng`, the env's generator."""

    def __call__(self, free: int, rng: np.random.Generator) -> int: ...


def plain_draw(rng: np.random.Generator, env: ScalingEnv) -> Episode:
    """A trace of `env`'s and the simulator's seed, drawn from `rng`, at its `total_units` and
    load 1 (no research option): the draw of an episode when `reset` is given none."""
    return draw_episode(rng, env.traces, env.base_units)


def action_masks(env: gym.Env) -> np.ndarray:
    """The action mask of `env` through any wrappers, as sb3-contrib reads it (the outermost
    `action_masks` there is)."""
    return env.get_wrapper_attr("action_masks")()


class ScalingEnv(gym.Env):
    """Observation: 30 floats in [0, 1]; action: Discrete(5) = -2..+2 replicas; reward: Eq. 3.2.

    `service` (with `profile`, default the registry's) alone in a pool of `total_units`, at
    request ratio `ratio`; each episode replays one trace, picked at random from `traces`, until it
    ends (truncated). The agent sees the real free units.

    What an episode draws and who shares its pool come through `reset(options=...)`, which the
    wrappers of testbed.train.wrappers fill in (EpisodeDraws, SharedPool, RandomFreeUnits; PoolReward
    reads the neighbours' reward from a step's info). During an episode `total_units`, `load` and
    `options` (the simulator's) are the episode's.
    """

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium's convention)

    def __init__(
        self,
        service: str,
        traces: Sequence[Trace],
        ratio: float,
        *,
        total_units: int = TOTAL_UNITS,
        profile: ServiceProfile | None = None,
    ):
        super().__init__()
        self.service = service
        self.traces = list(traces)
        self.ratio = ratio
        self.base_units = total_units
        self.profile = profile or default_profiles()[service]
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(N_METRICS * HISTORY,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(len(ACTIONS))
        self.total_units = total_units
        self.load = 1.0
        self.options = DEFAULT_OPTIONS
        self._cluster: SimCluster | None = None
        self._neighbours: PoolNeighbours | None = None
        self._others_reward = 0.0
        self._free_view: FreeUnitsView | None = None
        self._state = StateBuilder.for_profile(self.profile)
        self._mask = (0, 0, 1, 0, 0)
        self._cooldown = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an episode, the generator seeded with `seed` where given. `options`, each key
        optional: "episode", the Episode to run, or "draw", an EpisodeDraw that draws it (default
        plain_draw); "pool", a PoolSetup that opens the episode's cluster with its neighbours
        (default: the service alone); "free_units", a FreeUnitsView of the free units the agent
        sees when its service runs alone (default: the real ones)."""
        super().reset(seed=seed)
        options = options or {}
        episode = options.get("episode") or options.get("draw", plain_draw)(self.np_random, self)
        self.total_units, self.load, self.options = episode.units, episode.load, episode.options
        ratio = self.ratio * self.load * self.total_units / self.base_units
        pool: PoolSetup | None = options.get("pool")
        opened = pool.open(self, episode, ratio) if pool is not None else None
        if opened is None:
            self._neighbours = None
            self._cluster = SimCluster(
                {self.service: self.profile},
                {self.service: episode.trace},
                {self.service: ratio},
                total_units=self.total_units,
                seed=episode.seed,
                options=self.options,
            )
        else:
            self._cluster, self._neighbours = opened
        self._free_view = options.get("free_units")
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
        """Apply `action` (masked as Algorithm 3 does), let the neighbours after the agent decide,
        run one period. The info holds the period's `window`, the replicas `applied` and, in an
        episode with neighbours, their Eq. 3.2 for the period (`neighbours_reward`)."""
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
        obs = self._observe(window)
        info = {"window": window, "applied": delta}
        if self._neighbours is not None:
            info["neighbours_reward"] = self._others_reward
        return obs, r, False, cluster.done, info

    def action_masks(self) -> np.ndarray:
        """The actions allowed now (sb3-contrib's MaskablePPO reads them)."""
        return np.asarray(self._mask, dtype=bool)

    def _observe(self, window) -> np.ndarray:
        cluster = self._cluster
        units = cluster.units_per_replica(self.service)
        free = cluster.free_units()
        # a view stands in for services competing for the pool; real neighbours show real units
        if self._free_view is not None and self._neighbours is None:
            free = self._free_view(free, self.np_random)
        n = cluster.desired_replicas(self.service)
        self._mask = action_mask(n, free, units, self._cooldown)
        return self._state.push(window, self._mask, n, free // max(units, 1), self.total_units)

    def close(self) -> None:
        """Drop the episode's cluster."""
        self._cluster = None
