"""Maskable PPO (sb3-contrib): the policy wrapper around a trained model file and what the file says.

Training is in testbed.train.ppo. Needs the `drl` extra (torch, gymnasium, stable-baselines3,
sb3-contrib). A model file is sb3's zip with one more member, `testbed.json` (the manifest:
service, observation, profile, traces, training command, seed, commit, steps, best validation
reward); training also writes the manifest beside the zip as SERVICE.json.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

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


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest (`testbed.json`) a model file at `path` carries, as its JSON object (its fields:
    testbed.train.model_file.ModelMeta), or a ConfigError naming the file.

    path: the model file."""
    try:
        with zipfile.ZipFile(path) as zf:
            meta = json.loads(zf.read(META_MEMBER))
    except (OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise ConfigError(
            [ConfigProblem(str(path), None, META_MEMBER, f"not a testbed model file: {exc}")]
        ) from None
    if not isinstance(meta, dict) or not isinstance(meta.get("service"), str):
        raise ConfigError([ConfigProblem(str(path), None, META_MEMBER,
                                         "not a testbed model file: no service in its manifest")])
    return meta


def _problem(path: str | Path, message: str) -> ConfigError:
    return ConfigError([ConfigProblem(str(path), None, "model", message)])


class MaskablePpoPolicy:
    """A trained agent as a policy: deterministic action with the mask applied."""

    def __init__(self, model, meta: dict[str, Any] | None = None):
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
        meta = read_manifest(path)
        if service is not None and meta["service"] != service:
            raise _problem(path, f"an agent for {meta['service']!r}, not {service!r}; "
                                 f"use models/{service}.zip")
        if meta.get("observation") != OBSERVATION:
            raise _problem(
                path,
                f"trained on observation {meta.get('observation') or 'of an older version (absolute rate)'}; "
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
