"""Maskable PPO (sb3-contrib): the policy wrapper around a trained model file and what the file says.

Training is in testbed.train.ppo. Needs the `drl` extra (torch, gymnasium, stable-baselines3,
sb3-contrib). A model file is sb3's zip with one more member, `testbed.json` (the manifest:
service, observation, profile, traces, training command, seed, commit, steps, best validation
reward); training also writes the manifest beside the zip as SERVICE.json.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from testbed.errors import ConfigError, ConfigProblem, MissingRequirement
from testbed.profiles import paper
from testbed.scaler.actions import Mask
from testbed.scaler.state import N_METRICS, OBSERVATION

META_MEMBER = "testbed.json"


def require_drl():
    """A MissingRequirement naming the drl extra unless sb3-contrib and torch import."""
    try:
        import sb3_contrib  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        raise MissingRequirement(
            f"Maskable PPO needs the drl extra ({exc.name} missing): pip install 'testbed[drl]'"
        ) from None


@dataclass
class ModelMeta:
    """What a trained model file says about itself."""

    service: str
    profile: dict
    ratio: float
    total_units: int
    train_traces: list[str]
    val_traces: list[str]
    seed: int
    steps: int
    commit: str
    best_validation_reward: float | None = None
    validations: list[tuple[int, float]] = field(default_factory=list)
    observation: str | None = None  # testbed.scaler.state.OBSERVATION it was trained with
    command: str | None = None  # how to train it again
    scales: list[int] | None = None  # pool sizes drawn per training episode (None: total_units only)
    loads: list[float] | None = None  # ratio multipliers drawn per 8-unit episode (None: 1 only)
    shared: bool = False  # 8-unit episodes ran the three services sharing the pool (rule v2 beside)
    pool_reward: bool = False  # shared episodes rewarded the pool (the three services' Eq. 3.2)
    partners: dict[str, str] | None = None  # shared episodes: agent files of the other services
    validate_pool: bool = False  # checkpoints chosen on the pool's reward in shared validation
    release_below: float | None = None  # the starting agent was taught to release idle instances
    distilled: dict | None = None  # testbed.train.distill.DistillStats of that teaching
    hold_largest: bool = False  # PPO trained the smaller pools; the largest kept the starting agent's
    held: dict | None = None  # testbed.train.distill.HoldStats of this checkpoint's fitting
    like_testbed: float = 0.0  # share of episodes with the local testbed's clients (TESTBED_OPTIONS)


def read_meta(path: str | Path) -> ModelMeta:
    """The ModelMeta a model file at `path` carries, or a ConfigError naming the file."""
    try:
        with zipfile.ZipFile(path) as zf:
            return ModelMeta(**json.loads(zf.read(META_MEMBER)))
    except (OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError, TypeError) as exc:
        raise ConfigError(
            [ConfigProblem(str(path), None, META_MEMBER, f"not a testbed model file: {exc}")]
        ) from None


def _problem(path: str | Path, message: str) -> ConfigError:
    return ConfigError([ConfigProblem(str(path), None, "model", message)])


class MaskablePpoPolicy:
    """A trained agent as a policy: deterministic action with the mask applied."""

    def __init__(self, model, meta: ModelMeta | None = None):
        self.model = model
        self.meta = meta
        self.name = "ppo"

    @classmethod
    def load(cls, path: str | Path, service: str | None = None) -> MaskablePpoPolicy:
        """Load `path`, refusing (one ConfigError naming the file) a missing file, another
        service's agent, or one trained on another observation."""
        path = Path(path)
        retrain = f"testbed train {service or 'SERVICE'} --traces TRACES"
        if not path.is_file():
            raise _problem(path, f"no such model file; the shipped agents are in models/, or run `{retrain}`")
        meta = read_meta(path)
        if service is not None and meta.service != service:
            raise _problem(path, f"an agent for {meta.service!r}, not {service!r}; use models/{service}.zip")
        if meta.observation != OBSERVATION:
            raise _problem(
                path,
                f"trained on observation {meta.observation or 'of an older version (absolute rate)'}; "
                f"this version builds {OBSERVATION!r}: run `{retrain}`",
            )
        require_drl()
        from sb3_contrib import MaskablePPO

        model = MaskablePPO.load(str(path), device="cpu")
        shape = tuple(model.observation_space.shape or ())
        if shape != (N_METRICS * paper.HISTORY,):
            raise _problem(path, f"observation size {shape}, the scaler builds {N_METRICS * paper.HISTORY}")
        return cls(model, meta)

    def act(self, observation: np.ndarray, action_mask: Mask) -> int:
        """The agent's deterministic action for `observation` under `action_mask`."""
        action, _ = self.model.predict(
            np.asarray(observation, dtype=np.float32),
            action_masks=np.asarray(action_mask, dtype=bool),
            deterministic=True,
        )
        return int(action)
