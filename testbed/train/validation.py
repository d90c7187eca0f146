"""Scoring a PPO agent for checkpoint selection: its deterministic episode rewards on the validation
day, over the setups a training run validates (pool sizes, loads, shared pool, testbed clients)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np

from testbed.load.trace import Trace
from testbed.profiles import ServiceProfile
from testbed.scaler.policies import Policy
from testbed.train.env import ScalingEnv, action_masks
from testbed.train.wrappers import EpisodeDraws, PoolReward, SharedPool


def validation_reward(
    model,
    service: str,
    traces: Sequence[Trace],
    ratio: float,
    total_units: int,
    episodes: int,
    *,
    scales: Sequence[int] | None = None,
    loads: Sequence[float] | None = None,
    shared: bool = False,
    pool_reward: bool = False,
    partners: Mapping[str, Policy] | None = None,
    like_testbed: bool = False,
    profile: ServiceProfile | None = None,
) -> float:
    """Mean total episode reward of the deterministic agent (no free-unit randomisation).

    With `scales`, the mean over the smallest and the largest pool size, `episodes` each (the
    ratio scaled with the units as in training). With `loads`, each load multiplier counts as a
    setup of its own at `total_units` (the largest scale stays at load 1); with `shared`, the
    `total_units` setups run the three services sharing the pool as Tables 5.1-5.2 do (SharedPool),
    the agent's own reward counted (the pool's, the three services', with `pool_reward`), the
    other services deciding with `partners` where given (rule v2 otherwise). With `like_testbed`,
    one more setup: `total_units` at load 1 with the clients and balancer of the local testbed
    (EpisodeDraws' `like_testbed`), shared the same way. `profile`: the service's profile in use
    (default the registry's)."""
    if scales or loads or like_testbed:
        setups = [(total_units, load, False) for load in (loads or [1.0])]
        if like_testbed:
            setups.append((total_units, 1.0, True))
        if scales and max(scales) != total_units:
            setups.append((max(scales), 1.0, False))
        return float(
            np.mean(
                [
                    episodes_reward(
                        model, service, traces, ratio * load * u / total_units, u, episodes,
                        shared=shared and u == total_units, pool_reward=pool_reward,
                        partners=partners, testbed=testbed, profile=profile,
                    )
                    for u, load, testbed in setups
                ]
            )
        )
    return episodes_reward(
        model, service, traces, ratio, total_units, episodes, shared=shared,
        pool_reward=pool_reward, partners=partners, testbed=False, profile=profile,
    )


def episodes_reward(
    model, service, traces, ratio, total_units, episodes, *, shared, pool_reward, partners, testbed,
    profile: ServiceProfile | None = None,
) -> float:
    env = validation_env(service, traces, ratio, total_units, shared=shared, pool_reward=pool_reward,
                         partners=partners, testbed=testbed, profile=profile)
    totals = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=10_000 + ep)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, action_masks=action_masks(env), deterministic=True)
            obs, r, term, trunc, _ = env.step(int(action))
            total += r
            done = term or trunc
        totals.append(total)
    return float(np.mean(totals))


def validation_env(
    service: str,
    traces: Sequence[Trace],
    ratio: float,
    total_units: int,
    *,
    shared: bool = False,
    pool_reward: bool = False,
    partners: Mapping[str, Policy] | None = None,
    testbed: bool = False,
    profile: ServiceProfile | None = None,
) -> gym.Env:
    """One validation setup's environment: `service` (with `profile`) on `traces` at `ratio` in a
    pool of `total_units`, the real free units seen; `shared` with `partners` (SharedPool), the
    pool's reward with `pool_reward` (PoolReward), every episode with the local testbed's clients
    with `testbed` (EpisodeDraws)."""
    env: gym.Env = ScalingEnv(service, traces, ratio, total_units=total_units, profile=profile)
    if testbed:
        env = EpisodeDraws(env, like_testbed=1.0)
    if shared:
        env = SharedPool(env, partners)
    if pool_reward:
        env = PoolReward(env)
    return env


def episode_periods(service: str, trace: Trace, ratio: float, total_units: int,
                    profile: ServiceProfile | None = None) -> int:
    """The periods (agent steps) of one episode replaying `trace`: what a validation reward, a
    sum over an episode's periods, is divided by to read as the tables' per-period mean."""
    env = ScalingEnv(service, [trace], ratio, total_units=total_units, profile=profile)
    env.reset(seed=0)
    periods, done = 0, False
    while not done:
        mask = env.action_masks()
        _, _, term, trunc, _ = env.step(2 if mask[2] else int(np.argmax(mask)))  # hold if allowed
        periods, done = periods + 1, term or trunc
    return periods
