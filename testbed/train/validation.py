"""Scoring a PPO agent for checkpoint selection: its deterministic episode rewards on the validation
day, over the setups a training run validates (pool sizes, loads, shared pool, testbed clients)."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

from testbed.load.trace import Trace
from testbed.profiles import ServiceProfile
from testbed.train.env import ScalingEnv, action_masks
from testbed.train.wrappers import Research


def validation_reward(
    model,
    service: str,
    traces: Sequence[Trace],
    ratio: float,
    total_units: int,
    episodes: int,
    research: Research | None = None,
    *,
    profile: ServiceProfile | None = None,
) -> float:
    """Mean total episode reward of the deterministic agent (no free-unit randomisation), over
    the setups `research` validates (Research.validation_setups: its loads, the largest of its
    scales, its `mixed` options; shared as it trains), the ratio scaled with each setup's pool
    and load, `episodes` each. `profile`: the service's profile in use (default the registry's)."""
    research = research or Research()
    setups = research.validation_setups(total_units)
    if not (research.scales or research.loads or research.mixed_share):  # `ratio` as given
        return episodes_reward(model, service, traces, ratio, total_units, episodes, setups[0][2],
                               profile=profile)
    return float(np.mean([
        episodes_reward(model, service, traces, ratio * load * units / total_units, units, episodes,
                        wrappers, profile=profile)
        for units, load, wrappers in setups]))


def episodes_reward(
    model, service: str, traces: Sequence[Trace], ratio: float, total_units: int, episodes: int,
    research: Research, *, profile: ServiceProfile | None = None,
) -> float:
    """Mean total reward of `episodes` deterministic episodes of one setup (`validation_env`)."""
    env = validation_env(service, traces, ratio, total_units, research, profile=profile)
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
    research: Research,
    *,
    profile: ServiceProfile | None = None,
) -> gym.Env:
    """One validation setup's environment: `service` (with `profile`) on `traces` at `ratio` in a
    pool of `total_units`, the real free units seen, in `research`'s wrappers."""
    return research.wrap(ScalingEnv(service, traces, ratio, total_units=total_units,
                                    profile=profile))


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
