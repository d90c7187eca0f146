"""Behaviour cloning into an agent's policy network: teaching a trained agent to release an idle
instance before PPO fine-tunes it, and holding one pool size's behaviour fixed while the others
train (each validated checkpoint fitted to act there as the starting agent does)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from testbed.scaler.actions import ACTIONS
from testbed.scaler.state import latest
from testbed.train.env import ScalingEnv, action_masks

SCALE_DOWN_ONE = ACTIONS.index(-1)  # the action that removes one instance


@dataclass(frozen=True)
class DistillStats:
    """What distillation saw and how closely the network follows the teacher afterwards."""

    states: int
    released: int  # states where the teacher overrode the agent with -1
    kept_after: float  # share of the other states where the network still takes its own action
    released_after: float  # share of the released states where the network now takes -1


@dataclass(frozen=True)
class HoldStats:
    """One checkpoint fitted to its own behaviour at the trained pool sizes and to the starting
    agent's at the held one: states of each, and the share where the network's greedy action is
    the target's afterwards."""

    units: int  # the held pool size
    held_states: int
    held_agreement: float
    own_states: int
    own_agreement: float


@dataclass(frozen=True)
class States:
    """Observations and action masks an agent met, one row per decision."""

    observations: np.ndarray
    masks: np.ndarray

    def __len__(self) -> int:
        return len(self.observations)


def release_idle(action: int, observation: np.ndarray, mask: np.ndarray, below: float) -> int:
    """The agent's `action`, or -1 where that is allowed and the newest offered load per instance
    (the observation's request rate) is below `below`."""
    if mask[SCALE_DOWN_ONE] and latest(observation, "request_rate") < below:
        return SCALE_DOWN_ONE
    return action


def roll(
    model, env: gym.Env, episodes: int, seed: int,
    override: Callable[[int, np.ndarray, np.ndarray], int] | None = None,
) -> tuple[States, np.ndarray, np.ndarray]:
    """Run `episodes` of `env` with `model`'s deterministic decisions (changed by `override`
    where given): the states met, the actions taken and the model's own actions."""
    obs_l, mask_l, act_l, own_l = [], [], [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done = False
        while not done:
            mask = action_masks(env)
            own, _ = model.predict(obs, action_masks=mask, deterministic=True)
            action = override(int(own), obs, mask) if override else int(own)
            obs_l.append(obs)
            mask_l.append(mask)
            act_l.append(action)
            own_l.append(int(own))
            obs, _, term, trunc, _ = env.step(action)
            done = term or trunc
    states = States(np.asarray(obs_l, dtype=np.float32), np.asarray(mask_l, dtype=bool))
    return states, np.asarray(act_l), np.asarray(own_l)


def _logits(policy, x, masks):
    features = policy.extract_features(x, policy.pi_features_extractor)
    out = policy.action_net(policy.mlp_extractor.forward_actor(features))
    return out.masked_fill(~masks, -1e8)


def action_distribution(model, states: States) -> np.ndarray:
    """The policy's action probabilities (masked) in each state."""
    import torch

    with torch.no_grad():
        x = torch.as_tensor(states.observations)
        m = torch.as_tensor(states.masks)
        return torch.softmax(_logits(model.policy, x, m), dim=1).numpy()


def agreement(model, states: States, targets: np.ndarray) -> float:
    """Share of `states` where the policy's greedy action is the target distribution's."""
    if not len(states):
        return 1.0
    return float(np.mean(action_distribution(model, states).argmax(1) == targets.argmax(1)))


def fit_policy(
    model, states: States, targets: np.ndarray, *, epochs: int = 30, lr: float = 5e-4, seed: int = 0,
) -> None:
    """Fit `model`'s policy network (not its value network) to the action distributions
    `targets` in `states` by masked cross-entropy, minibatches of 1,024."""
    import torch

    policy = model.policy
    x = torch.as_tensor(states.observations)
    masks = torch.as_tensor(states.masks)
    y = torch.as_tensor(targets, dtype=torch.float32)
    params = list(policy.mlp_extractor.policy_net.parameters()) + list(policy.action_net.parameters())
    optimizer = torch.optim.Adam(params, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=generator)
        for i in range(0, len(order), 1024):
            idx = order[i : i + 1024]
            loss = torch.nn.functional.cross_entropy(_logits(policy, x[idx], masks[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def distill_release(
    model, env: gym.Env, below: float, *, episodes: int = 25, epochs: int = 30, lr: float = 5e-4,
    seed: int = 0,
) -> DistillStats:
    """Roll `episodes` of `env` with the teacher (`model` plus `release_idle`), then fit `model`'s
    policy network (not its value network) to the teacher by masked cross-entropy: the agent's own
    action distribution where the teacher is the agent, -1 where it releases."""
    states, actions, own = roll(
        model, env, episodes, seed, lambda a, obs, mask: release_idle(a, obs, mask, below)
    )
    override = actions != own
    # Where the teacher is the agent itself, its own distribution, not its argmax (near-ties).
    targets = action_distribution(model, states)
    targets[override] = np.eye(targets.shape[1], dtype=targets.dtype)[actions[override]]
    keep = States(states.observations[~override], states.masks[~override])
    release = States(states.observations[override], states.masks[override])
    if override.any():
        fit_policy(model, states, targets, epochs=epochs, lr=lr, seed=seed)
    # Some kept states flip too (no epoch agrees with the teacher more than the untaught agent
    # does): step 0's validation, not agreement, judges the taught agent.
    return DistillStats(
        len(states), int(override.sum()), agreement(model, keep, targets[~override]),
        agreement(model, release, targets[override]),
    )


class HeldScale:
    """The starting agent's behaviour at one pool size, recorded once on `env` (that size's
    training episodes), to be fitted into checkpoints trained at the other sizes."""

    def __init__(self, teacher, env: ScalingEnv, *, episodes: int = 5, seed: int = 0):
        self.units = env.total_units
        self.states, _, _ = roll(teacher, env, episodes, seed)
        self.targets = action_distribution(teacher, self.states)

    def fit(
        self, model, own_env: gym.Env, *, episodes: int = 10, epochs: int = 30, seed: int = 0,
    ) -> HoldStats:
        """Fit `model`'s policy network to its own action distribution on `episodes` of `own_env`
        (the trained pool sizes) and to the teacher's on the held states."""
        own, _, _ = roll(model, own_env, episodes, seed)
        own_targets = action_distribution(model, own)
        both = States(
            np.concatenate([own.observations, self.states.observations]),
            np.concatenate([own.masks, self.states.masks]),
        )
        fit_policy(model, both, np.concatenate([own_targets, self.targets]), epochs=epochs, seed=seed)
        return HoldStats(
            self.units, len(self.states), agreement(model, self.states, self.targets),
            len(own), agreement(model, own, own_targets),
        )
