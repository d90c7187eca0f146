"""The trainers `testbed train --policy` knows, by the policy their models run as: what each
trains (one model per service, or one actor over the paper's three services), with which
algorithm and for how many steps by default. Imports nothing heavy: `--help` reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from testbed.errors import ConfigError, ConfigProblem


@dataclass(frozen=True)
class Trainer:
    """One trainer: `policy` is the registry's policy its models run as (testbed.scaler.registry)."""

    policy: str
    algorithm: str  # the stable-baselines3 (or sb3-contrib) algorithm it trains with
    scope: Literal["service", "paper"]  # a model per service, or one over the paper's services
    default_steps: int | None  # None: the trainer's own default (PPO's episodes and schedule)
    description: str


TRAINERS: dict[str, Trainer] = {t.policy: t for t in (
    Trainer("ppo", "MaskablePPO", "service", None, "Maskable PPO for one service (Section 4.4.3)"),
    Trainer("ddpg", "DDPG", "paper", 12_000, "sb3 DDPG over MPS shares (the DDPG-MPS slides)"),
    Trainer("inss", "TD3", "paper", 12_000, "sb3 TD3, InSS's local stage"),
)}


def trainer(name: str) -> Trainer:
    """The trainer of policy `name`; a ConfigError at --policy naming the known ones."""
    try:
        return TRAINERS[name]
    except KeyError:
        raise ConfigError([ConfigProblem(
            "--policy", None, "policy",
            f"no trainer for policy {name!r}; use {', '.join(TRAINERS)}")]) from None


def choices_help() -> str:
    """`--policy`'s help: each trainer and what it trains."""
    return ", ".join(f"{t.policy} ({t.description})" for t in TRAINERS.values()) + "."
