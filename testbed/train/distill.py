"""Teach an agent to release an idle instance before PPO fine-tunes it: its own decisions, with a
scale-down by one wherever its offered load per instance reads below a threshold, distilled into
its policy network (behaviour cloning on the states the training environment produces)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from testbed.scaler.state import latest
from testbed.train.env import ScalingEnv

SCALE_DOWN_ONE = 1  # index of -1 in testbed.scaler.actions.ACTIONS (-2..+2)


@dataclass(frozen=True)
class DistillStats:
    """What distillation saw and how closely the network follows the teacher afterwards."""

    states: int
    released: int  # states where the teacher overrode the agent with -1
    agreement_before: float  # share of states where the agent already chose the teacher's action
    agreement_after: float


def release_idle(model, observation: np.ndarray, mask: np.ndarray, below: float) -> int:
    """The agent's deterministic action, or -1 where that is allowed and the newest offered load
    per instance (the observation's request rate) is below `below`."""
    if mask[SCALE_DOWN_ONE] and latest(observation, "request_rate") < below:
        return SCALE_DOWN_ONE
    action, _ = model.predict(observation, action_masks=mask, deterministic=True)
    return int(action)


def distill_release(
    model, env: ScalingEnv, below: float, *, episodes: int = 25, epochs: int = 30, seed: int = 0
) -> DistillStats:
    """Roll `episodes` of `env` with the teacher (`model` plus `release_idle`), then fit `model`'s
    policy network (not its value network) to the teacher's actions by masked cross-entropy."""
    import torch

    obs_l, mask_l, act_l, released = [], [], [], 0
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done = False
        while not done:
            mask = env.action_masks()
            action = release_idle(model, obs, mask, below)
            if action == SCALE_DOWN_ONE:
                own, _ = model.predict(obs, action_masks=mask, deterministic=True)
                released += int(own) != SCALE_DOWN_ONE
            obs_l.append(obs)
            mask_l.append(mask)
            act_l.append(action)
            obs, _, term, trunc, _ = env.step(action)
            done = term or trunc
    policy = model.policy
    x = torch.as_tensor(np.asarray(obs_l), dtype=torch.float32)
    masks = torch.as_tensor(np.asarray(mask_l), dtype=torch.bool)
    target = torch.as_tensor(np.asarray(act_l), dtype=torch.long)

    def logits(xb, mb):
        features = policy.extract_features(xb, policy.pi_features_extractor)
        out = policy.action_net(policy.mlp_extractor.forward_actor(features))
        return out.masked_fill(~mb, -1e8)

    def agreement() -> float:
        with torch.no_grad():
            return float((logits(x, masks).argmax(1) == target).float().mean())

    before = agreement()
    params = list(policy.mlp_extractor.policy_net.parameters()) + list(policy.action_net.parameters())
    optimizer = torch.optim.Adam(params, lr=5e-4)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(target), generator=generator)
        for i in range(0, len(order), 1024):
            batch = order[i : i + 1024]
            loss = torch.nn.functional.cross_entropy(logits(x[batch], masks[batch]), target[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return DistillStats(len(target), released, before, agreement())
