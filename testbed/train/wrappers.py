"""The research options of PPO training as Gymnasium wrappers around a ScalingEnv, to compose as a
run needs: what each episode draws, the shared pool, the pool's reward, randomised free units.

Each option wrapper passes its object to the env through `reset(options=...)` under its own key
(ScalingEnv.reset names them), so they compose in any order, and one of a user's own, in a file of
theirs, does the same with an object of its own (docs/sim.md, "Research options in Python").
Options a caller passes to `reset` win over the wrappers'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np

from testbed.scaler.policies import Policy
from testbed.sim.cluster import TESTBED_OPTIONS, SimCluster, SimOptions
from testbed.train.env import ScalingEnv, action_masks
from testbed.train.episode import Episode, Neighbours, draw_episode, shared_cluster


class MaskedWrapper(gym.Wrapper):
    """A wrapper of `env` that shows the action mask of what it wraps (gymnasium's wrappers
    forward no attributes; sb3-contrib finds the mask through them either way)."""

    def action_masks(self) -> np.ndarray:
        """The wrapped env's action mask."""
        return action_masks(self.env)


class ResetOption(MaskedWrapper):
    """A wrapper that hands the env one object under reset option `key` each episode (`value`)."""

    def __init__(self, env: gym.Env, key: str, value: Any):
        super().__init__(env)
        self.key, self.value = key, value

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """`env`'s reset with this wrapper's option added under its key (`seed`, `options` as
        gymnasium's; an `options` entry of the same key wins)."""
        return self.env.reset(seed=seed, options={self.key: self.value, **(options or {})})


class EpisodeDraws(ResetOption):
    """Each episode draws its pool size from `scales`, scaling the request ratio with it (the load
    per unit stays the one of the env's ratio at its `total_units`, an instance's price 1/units
    changes; the observation's unit-cost metric tells the agent its pool), a multiplier of the
    ratio from `loads` where the pool is the env's `total_units` (Table 5.2 doubles Table 5.1's
    ratios), and, in a share `mixed_share` of episodes, the simulator options `mixed` (by default
    the local testbed's clients and balancer, testbed.sim.cluster.TESTBED_OPTIONS: each second's
    requests from its start, utilization over ready replicas), so that an agent does not learn the
    published simulator's utilization samples, which always catch the request that arrived just
    before them, as the only reading there is (docs/notes/table-5.4-runs.md). Wraps `env`; the
    draw is testbed.train.episode.draw_episode."""

    def __init__(
        self,
        env: gym.Env,
        *,
        scales: Sequence[int] | None = None,
        loads: Sequence[float] | None = None,
        mixed: SimOptions = TESTBED_OPTIONS,
        mixed_share: float = 0.0,
    ):
        super().__init__(env, "draw", self.draw)
        self.scales = list(scales) if scales else None
        self.loads = list(loads) if loads else None
        self.mixed, self.mixed_share = mixed, mixed_share

    def draw(self, rng: np.random.Generator, env: ScalingEnv) -> Episode:
        """An episode of `env` drawn from `rng` with this wrapper's options."""
        return draw_episode(rng, env.traces, env.base_units, scales=self.scales, loads=self.loads,
                            mixed=self.mixed, mixed_share=self.mixed_share)


class SharedPool(ResetOption):
    """Episodes at the env's `total_units` run the way Tables 5.1 and 5.2 do: the three paper
    services share the pool, each replaying the episode's day shifted as the test day is (0/8/16 h)
    at its default ratio times the episode's load, the other two deciding in the tables' order
    around the agent (earlier services before it, later ones after it) with `partners` (service ->
    policy, e.g. the shipped agents, so that the agent learns beside the neighbours it will share
    the pool with) or rule v2. The agent then sees the real free units. Episodes at other pool
    sizes stay single-service. Wraps `env`, whose service must be one of the three."""

    def __init__(self, env: gym.Env, partners: Mapping[str, Policy] | None = None):
        super().__init__(env, "pool", self)
        self.partners = dict(partners or {})

    def open(self, env: ScalingEnv, episode: Episode, ratio: float) -> tuple[SimCluster, Neighbours] | None:
        """The shared cluster of `episode` (`env`'s service at `ratio`) and its neighbours, or None
        for an episode at another pool size than `env`'s own."""
        if episode.units != env.base_units:
            return None
        cluster = shared_cluster(env.service, env.profile, episode, ratio)
        return cluster, Neighbours(cluster, env.service, self.partners)


class PoolReward(MaskedWrapper):
    """In an episode with neighbours (SharedPool), a step's reward is the pool's: Eq. 3.2 of the
    agent plus Eq. 3.2 of the two others for the same period, so that holding units another
    service needs costs the agent what it costs the pool. Other steps keep the agent's own. Wraps
    `env`. (Not a RewardWrapper: the neighbours' reward comes in the step's info.)"""

    def step(self, action: int):
        """`env`'s step of `action`, its reward plus the info's `neighbours_reward` where there."""
        obs, r, terminated, truncated, info = self.env.step(action)
        if "neighbours_reward" in info:
            r += info["neighbours_reward"]
        return obs, r, terminated, truncated, info


class RandomFreeUnits(ResetOption):
    """In a share `share` of steps (half by default), the free units the agent sees, and so its
    action mask, are drawn between 0 and the real free units, standing in for other services
    competing for the pool (Section 4.4.3; the published simulator draws in half of its calls,
    simpy_env.py:303-306). Episodes with neighbours (SharedPool) show the real free units. Wraps
    `env`."""

    def __init__(self, env: gym.Env, share: float = 0.5):
        super().__init__(env, "free_units", self.view)
        self.share = share

    def view(self, free: int, rng: np.random.Generator) -> int:
        """The free units seen when `free` are free, drawn from `rng` in a share of calls."""
        if rng.random() < self.share:
            return int(rng.integers(0, free + 1))
        return free


@dataclass(frozen=True)
class Research:
    """A PPO run's research options as the wrappers they put around a ScalingEnv (`wrap`), in
    this order: what each episode draws (pool size from `scales`, load from `loads`, the simulator
    options `mixed` in a share `mixed_share` of episodes: EpisodeDraws), the shared pool with
    `partners` (SharedPool), the pool's reward (PoolReward), randomised free units
    (RandomFreeUnits). One value, made from a run's options once (TrainConfig.research), that
    training, validation and the tools beside them wrap their environments in."""

    scales: tuple[int, ...] = ()
    loads: tuple[float, ...] = ()
    mixed: SimOptions = TESTBED_OPTIONS
    mixed_share: float = 0.0
    shared: bool = False
    partners: Mapping[str, Policy] | None = None
    pool_reward: bool = False
    random_free_units: bool = False

    def wrap(self, env: gym.Env) -> gym.Env:
        """`env` in this value's wrappers."""
        if self.scales or self.loads or self.mixed_share:
            env = EpisodeDraws(env, scales=self.scales, loads=self.loads, mixed=self.mixed,
                               mixed_share=self.mixed_share)
        if self.shared:
            env = SharedPool(env, self.partners)
        if self.pool_reward:
            env = PoolReward(env)
        if self.random_free_units:
            env = RandomFreeUnits(env)
        return env

    def validation_setups(self, total_units: int) -> list[tuple[int, float, Research]]:
        """The setups a validation scores, each (pool size, load, its wrappers), every episode
        deterministic: each of `loads` (1 without) at `total_units`, shared there as training
        is; with `mixed_share`, one more at load 1 with `mixed` in every episode; with `scales`,
        the largest pool size at load 1 on its own (the smallest is `total_units`)."""
        at_base = Research(shared=self.shared, partners=self.partners, pool_reward=self.pool_reward)
        if not (self.scales or self.loads or self.mixed_share):
            return [(total_units, 1.0, at_base)]
        setups = [(total_units, load, at_base) for load in (self.loads or (1.0,))]
        if self.mixed_share:
            setups.append((total_units, 1.0, replace(at_base, mixed=self.mixed, mixed_share=1.0)))
        if self.scales and max(self.scales) != total_units:
            setups.append((max(self.scales), 1.0, replace(at_base, shared=False)))
        return setups
