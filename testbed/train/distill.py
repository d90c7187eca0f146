"""Teach an agent to release an idle instance before PPO fine-tunes it: its own decisions, with a
scale-down by one wherever its offered load per instance reads below a threshold, distilled into
its policy network (behaviour cloning on the states the training environment produces)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from testbed.scaler.actions import ACTIONS
from testbed.scaler.state import latest
from testbed.train.env import ScalingEnv

SCALE_DOWN_ONE = ACTIONS.index(-1)  # the action that removes one instance


@dataclass(frozen=True)
class DistillStats:
    """What distillation saw and how closely the network follows the teacher afterwards."""

    states: int
    released: int  # states where the teacher overrode the agent with -1
    kept_after: float  # share of the other states where the network still takes its own action
    released_after: float  # share of the released states where the network now takes -1


def release_idle(action: int, observation: np.ndarray, mask: np.ndarray, below: float) -> int:
    """The agent's `action`, or -1 where that is allowed and the newest offered load per instance
    (the observation's request rate) is below `below`."""
    if mask[SCALE_DOWN_ONE] and latest(observation, "request_rate") < below:
        return SCALE_DOWN_ONE
    return action


def distill_release(
    model, env: ScalingEnv, below: float, *, episodes: int = 25, epochs: int = 30, lr: float = 5e-4,
    seed: int = 0,
) -> DistillStats:
    """Roll `episodes` of `env` with the teacher (`model` plus `release_idle`), then fit `model`'s
    policy network (not its value network) to the teacher by masked cross-entropy: the agent's own
    action distribution where the teacher is the agent, -1 where it releases."""
    import torch

    obs_l, mask_l, act_l, own_l = [], [], [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done = False
        while not done:
            mask = env.action_masks()
            own, _ = model.predict(obs, action_masks=mask, deterministic=True)
            action = release_idle(int(own), obs, mask, below)
            obs_l.append(obs)
            mask_l.append(mask)
            act_l.append(action)
            own_l.append(int(own))
            obs, _, term, trunc, _ = env.step(action)
            done = term or trunc
    policy = model.policy
    x = torch.as_tensor(np.asarray(obs_l), dtype=torch.float32)
    masks = torch.as_tensor(np.asarray(mask_l), dtype=torch.bool)
    target = torch.as_tensor(np.asarray(act_l), dtype=torch.long)
    override = target != torch.as_tensor(np.asarray(own_l), dtype=torch.long)

    def logits(xb, mb):
        features = policy.extract_features(xb, policy.pi_features_extractor)
        out = policy.action_net(policy.mlp_extractor.forward_actor(features))
        return out.masked_fill(~mb, -1e8)

    with torch.no_grad():  # where the teacher is the agent itself, its own distribution, not its argmax
        soft = torch.softmax(logits(x, masks), dim=1)
    soft[override] = torch.nn.functional.one_hot(target[override], soft.shape[1]).float()
    keep, release = (~override).nonzero().flatten(), override.nonzero().flatten()

    def agreement(idx) -> float:
        with torch.no_grad():
            hits = logits(x[idx], masks[idx]).argmax(1) == target[idx]
        return float(hits.float().mean()) if len(idx) else 1.0

    params = list(policy.mlp_extractor.policy_net.parameters()) + list(policy.action_net.parameters())
    optimizer = torch.optim.Adam(params, lr=lr)
    generator = torch.Generator().manual_seed(seed)

    def ce(idx):
        return torch.nn.functional.cross_entropy(logits(x[idx], masks[idx]), soft[idx])

    for _ in range(epochs if len(release) else 0):
        order = torch.randperm(len(target), generator=generator)
        for i in range(0, len(order), 1024):
            loss = ce(order[i : i + 1024])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    # Some kept states flip too (no epoch agrees with the teacher more than the untaught agent
    # does): step 0's validation, not agreement, judges the taught agent.
    return DistillStats(len(target), len(release), agreement(keep), agreement(release))
