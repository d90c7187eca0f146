"""The options of one Maskable PPO training run (testbed.train.ppo), checked together when made."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles import paper

if TYPE_CHECKING:
    from testbed.profiles import ServiceProfile


@dataclass(frozen=True)
class TrainConfig:
    """What `testbed train --policy ppo` trains and how; an inconsistent combination of options
    is refused here, as one ConfigError naming the CLI option, before anything is read or written.

    `stop_at` ends training after that many steps while the learning rate still decays over
    `steps` (a run cut short, reproducibly). `scales`: pool sizes drawn per episode, the ratio
    scaled with them (testbed.train.wrappers.EpisodeDraws); validation then averages the smallest
    and the largest.
    `init_from`: a model file whose weights start training (same 64x64 layers); one trained on
    fewer observation inputs (the 25-float observation before the unit-cost cue) gets zero
    weights on the new inputs, so training starts from its policy at every pool size; its own
    validation is then the first one (step 0), so a checkpoint is kept only if it validates
    better than the model it started from. `loads` and `shared`: see EpisodeDraws and SharedPool
    (the 8-unit episodes at several load multipliers, the three services sharing the pool); validation
    then covers each load, shared the same way; `pool_reward`: shared episodes (training and
    validation) score the three services' rewards together. `partners`: a folder of agents
    (SERVICE.zip) that decide the other two services in shared episodes and their validation
    instead of rule v2, e.g. models/ (those loaded before training starts). `validate_pool`:
    shared validation scores the three services' rewards together while training keeps the
    agent's own (a checkpoint is kept for what it does to the pool, not only to itself).
    `checkpoints`: a folder where every validated model is also written (SERVICE-STEPS.zip).
    `release_below` (needs `init_from`): before training, the starting agent is taught to scale
    down by one wherever its offered load per instance reads below this (testbed.train.distill,
    on 25 episodes of the training environment); that model is then the one validated at step 0.
    `hold_largest` (needs `init_from` and two `scales` or more): PPO trains on the smaller pool
    sizes only, and each validated checkpoint is a copy of the trained model fitted to act at the
    largest size as the starting agent does (testbed.train.distill.HeldScale) and to keep its own
    decisions at the others; the copy is validated at every size and saved, PPO goes on from the
    unfitted model. (Updates learnt at 8 units otherwise move the 128-unit behaviour too.)
    `like_testbed`: the share of training episodes run with the local testbed's clients and
    balancer (EpisodeDraws); validation then adds that setup at `total_units`, load 1.
    `resume` (needs `checkpoints`): go on from the newest checkpoint there (its weights, step
    count and validations; `init_from` and `release_below` were applied before it) up to `steps`.
    `ppo_params` override the paper's PPO hyperparameters (sb3's names, e.g. ent_coef)."""

    service: str
    ratio: float | None = None  # None: the paper's default ratio of `service`
    total_units: int = paper.TOTAL_UNITS
    steps: int = paper.MAX_TRAIN_STEPS
    validate_every: int = paper.VALIDATION_EVERY
    val_episodes: int = paper.VALIDATION_EPISODES
    patience: int = paper.EARLY_STOP_PATIENCE
    min_validations: int = paper.EARLY_STOP_MIN_VALIDATIONS
    seed: int = 0
    tensorboard: str | None = None
    learning_rate: float = paper.LEARNING_RATE
    ppo_params: dict | None = None
    stop_at: int | None = None
    scales: Sequence[int] | None = None
    init_from: str | Path | None = None
    loads: Sequence[float] | None = None
    shared: bool = False
    pool_reward: bool = False
    partners: str | Path | None = None
    validate_pool: bool = False
    checkpoints: str | Path | None = None
    release_below: float | None = None
    hold_largest: bool = False
    like_testbed: float = 0.0
    resume: bool = False
    profile: ServiceProfile | None = None  # the service's profile in use; None: the registry's

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise ConfigError([problem])

    def problem(self) -> ConfigProblem | None:
        """The first inconsistent option, in the order the CLI has always reported them."""
        checks = (
            (self.partners is not None and not self.shared, "--partners", "partners",
             "partner agents decide in shared episodes: add --shared"),
            (self.validate_pool and not self.shared, "--validate-pool", "validate_pool",
             "the pool's reward is scored in shared validation: add --shared"),
            (self.release_below is not None and not self.init_from, "--release-below", "release_below",
             "releasing idle instances is taught to a trained agent: add --init-from"),
            (self.release_below is not None and not 0 < self.release_below < 1, "--release-below",
             "release_below", f"{self.release_below:g}: the observation's request rate lies in (0, 1)"
             if self.release_below is not None else ""),
            (self.pool_reward and not self.shared, "--pool-reward", "pool_reward",
             "the pool's reward is scored in shared episodes: add --shared"),
            (self.hold_largest and not (self.init_from and self.scales and len(set(self.scales)) >= 2),
             "--hold-largest", "hold_largest",
             "holding the largest pool size needs a starting agent and two sizes: --init-from, --scales"),
            (not 0 <= self.like_testbed <= 1, "--like-testbed", "like_testbed",
             f"{self.like_testbed:g}: a share of episodes, between 0 and 1"),
            (self.ent_coef < 0, "--ent-coef", "ent_coef", f"{self.ent_coef:g}: must be >= 0"),
            (self.resume and self.checkpoints is None, "--resume", "resume",
             "resuming continues from the checkpoints of a run: add --checkpoints DIR"),
            (self.shared and self.service not in paper.TEST_SHIFT_HOURS, "--shared", "shared",
             f"shared episodes run the paper's three services on the test day's shifts; "
             f"{self.service} is not one of them"),
            (self.resume and self.hold_largest, "--resume", "resume",
             "a --hold-largest checkpoint is the fitted copy, not the model PPO goes on from"),
        )
        for failed, option, field, why in checks:
            if failed:
                return ConfigProblem(option, None, field, why)
        return None

    @property
    def ent_coef(self) -> float:
        """The entropy bonus of the PPO loss (`ppo_params`' ent_coef; 0, sb3's default)."""
        return (self.ppo_params or {}).get("ent_coef", 0.0)

    @property
    def service_ratio(self) -> float:
        """The request ratio the agent's own service trains at (`ratio`, or the default: the
        paper's for its three services, 1 for another)."""
        return paper.DEFAULT_RATIOS.get(self.service, 1.0) if self.ratio is None else self.ratio

    @property
    def train_scales(self) -> list[int] | None:
        """The pool sizes PPO trains on: `scales`, less the largest with `hold_largest`."""
        if self.hold_largest:
            return [u for u in self.scales if u != max(self.scales)]
        return self.scales
