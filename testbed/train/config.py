"""The options of one Maskable PPO training run (testbed.train.ppo), checked together when made."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles import paper
from testbed.train.options import PpoOptions

if TYPE_CHECKING:
    from testbed.profiles import ServiceProfile
    from testbed.scaler.policies import Policy
    from testbed.train.wrappers import Research


@dataclass(kw_only=True)
class TrainConfig(PpoOptions):
    """What `testbed train --policy ppo` trains and how: the service, its pool and the paper's
    training schedule, and the research options (PpoOptions, declared once with the command line's
    and the --config file's options in testbed.train.options). An inconsistent combination is
    refused here, as one ConfigError naming the CLI option, before anything is read or written.
    `ppo_params` override the paper's PPO hyperparameters (sb3's names)."""

    service: str
    ratio: float | None = None  # None: the paper's default ratio of `service`
    total_units: int = paper.TOTAL_UNITS
    steps: int = paper.MAX_TRAIN_STEPS
    validate_every: int = paper.VALIDATION_EVERY
    val_episodes: int = paper.VALIDATION_EPISODES
    patience: int = paper.EARLY_STOP_PATIENCE
    min_validations: int = paper.EARLY_STOP_MIN_VALIDATIONS
    seed: int = 0
    learning_rate: float = paper.LEARNING_RATE
    ppo_params: dict | None = None
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
    def service_ratio(self) -> float:
        """The request ratio the agent's own service trains at (`ratio`, or the default: the
        paper's for its three services, 1 for another)."""
        return paper.DEFAULT_RATIOS.get(self.service, 1.0) if self.ratio is None else self.ratio

    def research(self, partners: Mapping[str, Policy] | None,
                 purpose: Literal["train", "validate", "release", "hold"] = "train") -> Research:
        """The wrappers this run's environments are made in, one home for how its research
        options map to them: training draws each episode's pool size from `train_scales`, its
        load from `loads` and the local testbed's clients in a share `like_testbed`, in the
        shared pool with `partners`, the pool's reward with `pool_reward`, randomised free units;
        validation scores `scales`' extremes, each load and (with `like_testbed`) the testbed's
        clients in every episode, the pool's reward with `validate_pool` too; `release_below`
        teaches over `scales` and `hold_largest`'s fitted copy trains as training does, neither
        with the pool's reward nor randomised free units."""
        # gymnasium and the simulator only once a run makes its environments: the CLI checks a
        # TrainConfig before anything heavy is imported
        from testbed.sim.cluster import TESTBED_OPTIONS
        from testbed.train.wrappers import Research

        draws = {"scales": tuple(self.train_scales or ()), "loads": tuple(self.loads or ()),
                 "mixed": TESTBED_OPTIONS, "mixed_share": self.like_testbed}
        pool = {"shared": self.shared, "partners": partners}
        if purpose == "validate":
            return Research(**{**draws, "scales": tuple(self.scales or ()),
                               "mixed_share": 1.0 if self.like_testbed > 0 else 0.0},
                            **pool, pool_reward=self.pool_reward or self.validate_pool)
        if purpose == "release":
            return Research(scales=tuple(self.scales or ()), loads=draws["loads"], **pool)
        if purpose == "hold":
            return Research(**draws, **pool)
        return Research(**draws, **pool, pool_reward=self.pool_reward, random_free_units=True)

    @property
    def train_scales(self) -> list[int] | None:
        """The pool sizes PPO trains on: `scales`, less the largest with `hold_largest`."""
        if self.hold_largest:
            return [u for u in self.scales if u != max(self.scales)]
        return self.scales
