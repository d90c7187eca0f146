"""A PPO training run's bookkeeping as Stable-Baselines3 callbacks, composed in a CallbackList: the
learning curve and progress, validation keeping the best model, and after each validation the
checkpoints and when to stop; HoldLargest validates fitted copies instead of the trained model.

Imports stable_baselines3, so only where the drl extra is required (testbed.train.ppo.train).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.callbacks import BaseCallback, EventCallback

from testbed.errors import ConfigError, ConfigProblem
from testbed.train.curve import TrainingStatus, curve_paths, write_curve
from testbed.train.distill import HeldScale
from testbed.train.model_file import ModelMeta, save_model, write_meta


class LearningCurve(BaseCallback):
    """Records each training episode that ends (sb3's Monitor reports it: the step at its end, its
    reward and periods), hands a TrainingStatus to `progress` every `report_every` steps, and
    writes the learning curve beside `out` (testbed.train.curve) with the validations of manifest
    `meta`; `val_periods` is the periods of a validation episode (the per-period scale). Validation
    rewrites the curve after each validation and at the end of training."""

    def __init__(
        self, out: Path, meta: ModelMeta, val_periods: int, *,
        progress: Callable[[TrainingStatus], None] | None = None, report_every: int = 256,
    ):
        super().__init__()
        self.out, self.meta, self.val_periods = out, meta, val_periods
        self.progress, self.report_every = progress, report_every
        self.episodes: list[tuple[int, float, int]] = []  # step at the end, reward, periods

    def _on_step(self) -> bool:
        n = self.num_timesteps
        for info in self.locals.get("infos", ()):
            if "episode" in info:
                self.episodes.append((n, float(info["episode"]["r"]), int(info["episode"]["l"])))
        if self.progress is not None and n % self.report_every == 0:
            self.progress(self.status(n))
        return True

    def status(self, n: int) -> TrainingStatus:
        """The run at step `n`: the last ten training episodes' mean reward and length, the last
        and the best validation."""
        recent, meta = self.episodes[-10:], self.meta
        return TrainingStatus(
            n,
            float(np.mean([r for _, r, _ in recent])) if recent else None,
            float(np.mean([length for _, _, length in recent])) if recent else None,
            meta.validations[-1][1] if meta.validations else None,
            meta.best_validation_reward,
            self.val_periods,
        )

    def write(self, *, plot: bool = True) -> None:
        """Write the curve's JSON, and its PNG with `plot`."""
        write_curve(self.out, self.meta, self.episodes, self.val_periods, plot=plot)

    def restore(self, steps: int) -> None:
        """The episodes of the curve beside `out` that ended by step `steps` (a resumed run's)."""
        curve_json = curve_paths(self.out)[0]
        if curve_json.exists():
            self.episodes = [
                (e["step"], e["reward"], e["periods"])
                for e in json.loads(curve_json.read_text())["training"]
                if e["step"] <= steps
            ]


@dataclass(frozen=True)
class Validated:
    """One validation: its step, the model validated, its score and the stats of its making."""

    step: int
    model: Any
    score: float
    stats: dict | None


class Validation(EventCallback):
    """Every `every` steps, scores the model's candidate (the model itself here) with `score` (e.g.
    testbed.train.validation.validation_reward), adds it to manifest `meta`'s validations, logs it
    (validation/mean_reward: Figure 4.6 in TensorBoard) and writes the best so far to `out`; then
    rewrites `curve` (a LearningCurve) and calls `callback`, sb3's callback after an evaluation
    (Checkpoints, StopAt, EarlyStopping, or a CallbackList of them, which read `parent.last` and
    `parent.stale`). At the end of training it writes the final manifest and curve; with no
    validation yet, the trained model is validated then and written as the best."""

    def __init__(
        self, score: Callable[[Any], float], out: Path, meta: ModelMeta, *, every: int,
        curve: LearningCurve | None = None, callback: BaseCallback | None = None,
    ):
        super().__init__(callback)
        self.score, self.out, self.meta, self.every, self.curve = score, out, meta, every, curve
        self.stale = 0  # validations since the best one
        self.last: Validated | None = None

    def candidate(self, model) -> tuple[Any, dict | None]:  # type: ignore[no-untyped-def]
        """The model to validate and save for trained `model`, and the stats of its making."""
        return model, None

    def start_from(self, model) -> None:  # type: ignore[no-untyped-def]
        """Validate the starting `model` at step 0: a checkpoint must do better to be kept."""
        self.meta.best_validation_reward = self.score(model)
        self.meta.validations.append((0, self.meta.best_validation_reward))
        save_model(model, self.out, self.meta)

    def restore(self, resumed: ModelMeta, checkpoints: Path) -> None:
        """Go on from the run of manifest `resumed`: its validations and its best model (from the
        folder `checkpoints`, else the one already at `out`)."""
        meta, out = self.meta, self.out
        meta.validations = [(int(n), float(r)) for n, r in resumed.validations]  # JSON: lists
        meta.distilled = resumed.distilled
        meta.steps, meta.best_validation_reward = max(meta.validations, key=lambda v: v[1])
        best_at = meta.validations.index((meta.steps, meta.best_validation_reward))
        self.stale = len(meta.validations) - 1 - best_at
        best_file = Path(checkpoints) / f"{meta.service}-{meta.steps}.zip"
        if best_file.exists():
            shutil.copyfile(best_file, out)
            write_meta(out, meta)
        elif not out.exists():
            why = f"the best model so far (step {meta.steps}) is neither {out} nor {best_file}"
            raise ConfigError([ConfigProblem("--resume", None, "resume", why)])

    def _on_step(self) -> bool:
        n = self.num_timesteps
        if n % self.every:
            return True
        meta = self.meta
        candidate, stats = self.candidate(self.model)
        score = self.score(candidate)
        meta.validations.append((n, score))
        self.last = Validated(n, candidate, score, stats)
        self.logger.record("validation/mean_reward", score)
        if meta.best_validation_reward is None or score > meta.best_validation_reward:
            meta.best_validation_reward, meta.steps, meta.held, self.stale = score, n, stats, 0
            save_model(candidate, self.out, meta)
        else:
            self.stale += 1
        if self.curve is not None:
            self.curve.write(plot=False)  # kept if the run is cut off
        return self._on_event()

    def _on_training_end(self) -> None:
        meta, model = self.meta, self.model
        if meta.best_validation_reward is None:  # budget shorter than one validation period
            candidate, meta.held = self.candidate(model)
            meta.best_validation_reward = self.score(candidate)
            meta.validations.append((model.num_timesteps, meta.best_validation_reward))
            meta.steps = model.num_timesteps
            save_model(candidate, self.out, meta)
        else:
            write_meta(self.out, meta)  # every validation, also those after the best
        if self.curve is not None:
            self.curve.write()


class HoldLargest(Validation):
    """Validation whose candidate is a copy of the trained model (into `fitted`, a model of the
    same network) fitted to act at the held pool size as the starting agent does (`held`) and to
    keep its own decisions on `own_env` (the trained sizes), with `seed`; PPO goes on from the
    unfitted model. `score`, `out`, `meta`, `every`, `curve`, `callback` as Validation's."""

    def __init__(
        self, score: Callable[[Any], float], out: Path, meta: ModelMeta, *, every: int,
        held: HeldScale, own_env: gym.Env, fitted: Any, seed: int,
        curve: LearningCurve | None = None, callback: BaseCallback | None = None,
    ):
        super().__init__(score, out, meta, every=every, curve=curve, callback=callback)
        self.held, self.own_env, self.fitted, self.seed = held, own_env, fitted, seed

    def candidate(self, model) -> tuple[Any, dict | None]:  # type: ignore[no-untyped-def]
        """The fitted copy of trained `model` and its HoldStats (as a dict)."""
        self.fitted.policy.load_state_dict(model.policy.state_dict())
        return self.fitted, asdict(self.held.fit(self.fitted, self.own_env, seed=self.seed))


class Checkpoints(BaseCallback):
    """After each validation (a child of Validation), writes the validated model to `folder` as
    SERVICE-STEPS.zip, its manifest as of that validation."""

    def __init__(self, folder: str | Path):
        super().__init__()
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def _on_step(self) -> bool:
        last, meta = self.parent.last, self.parent.meta
        mine = replace(meta, steps=last.step, best_validation_reward=last.score,
                       validations=list(meta.validations), held=last.stats)
        save_model(last.model, self.folder / f"{meta.service}-{last.step}.zip", mine)
        return True


class StopAt(BaseCallback):
    """After a validation (a child of Validation), stops training once `steps` steps are done."""

    def __init__(self, steps: int):
        super().__init__()
        self.steps = steps

    def _on_step(self) -> bool:
        return self.num_timesteps < self.steps


class EarlyStopping(BaseCallback):
    """After a validation (a child of Validation), stops training once there are `min_validations`
    validations and the last `patience` of them did not beat the best."""

    def __init__(self, patience: int, min_validations: int):
        super().__init__()
        self.patience, self.min_validations = patience, min_validations

    def _on_step(self) -> bool:
        validation = self.parent
        return not (len(validation.meta.validations) >= self.min_validations
                    and validation.stale >= self.patience)
