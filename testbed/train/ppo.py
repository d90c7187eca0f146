"""Maskable PPO training on the simulator (Section 4.4.3): validation, early stopping, the best
model written as sb3's zip plus the `testbed.json` member that testbed.scaler.ppo reads."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import gymnasium as gym
import numpy as np

from testbed.errors import ConfigError, ConfigProblem, MissingRequirement
from testbed.load.trace import Trace
from testbed.paths import git_commit
from testbed.profiles import paper
from testbed.scaler.policies import Policy
from testbed.scaler.ppo import ModelMeta, read_meta, require_drl
from testbed.scaler.state import OBSERVATION
from testbed.train.command import rerunnable_command
from testbed.train.config import TrainConfig
from testbed.train.curve import TrainingStatus, curve_paths, write_curve
from testbed.train.distill import HeldScale, distill_release
from testbed.train.env import ScalingEnv
from testbed.train.model_file import latest_checkpoint, load_partners, save_model, write_meta
from testbed.train.validation import episode_periods, episodes_reward, validation_reward
from testbed.train.wrappers import EpisodeDraws, PoolReward, RandomFreeUnits, SharedPool

__all__ = ["TrainConfig", "curve_paths", "load_partners", "train", "validation_reward", "write_meta"]

# the private names these had here before they moved out, which tests still use
_save = save_model
_episodes_reward = episodes_reward


def train(
    config: TrainConfig | str,
    train_traces: Sequence[Trace],
    val_traces: Sequence[Trace],
    out: str | Path,
    *,
    progress: Callable[[TrainingStatus], None] | None = None,
    command: str | None = None,
    **options,
) -> ModelMeta:
    """Train Maskable PPO as in Section 4.4.3 as `config` says and write the best validated model
    to `out`. `config` may also be the service's name with TrainConfig's fields as keywords.

    `command` is the command line the manifest records (rerunnable_command). `progress` is
    called every 256 steps with a TrainingStatus. Beside `out` goes its learning curve
    (curve_paths: training episodes and validations, JSON and PNG)."""
    if not isinstance(config, TrainConfig):
        config = TrainConfig(config, **options)
    require_drl()
    import torch

    _require_tensorboard(config.tensorboard)
    resume_from, resumed = _resume_point(config)
    partners = load_partners(config.partners, config.service)
    torch.set_num_threads(1)
    env = research_env(config, train_traces, partners, scales=config.train_scales,
                       like_testbed=config.like_testbed, pool_reward=config.pool_reward,
                       random_free_units=True)
    model = _new_model(env, config)
    if resume_from is not None:
        from sb3_contrib import MaskablePPO

        model = MaskablePPO.load(str(resume_from), env=env, device="cpu",
                                 tensorboard_log=config.tensorboard)
    elif config.init_from:
        _load_weights(model, config.init_from)
    distilled = None
    if config.release_below is not None and resumed is None:
        distilled = _release_idle(model, config, train_traces, partners)
    held = _HeldLargest(model, env, config, train_traces, partners) if config.hold_largest else None
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = _manifest(config, env.unwrapped, train_traces, val_traces, partners, distilled, command)
    run = _Run(config, out, meta, val_traces, partners, held, progress)
    if resumed is not None:
        run.restore(resumed)
    elif config.init_from:  # the starting model is the one to beat
        run.start_from(model)
    model.learn(
        total_timesteps=config.steps - (resumed.steps if resumed else 0),
        callback=_callback(run),
        progress_bar=False,
        reset_num_timesteps=resumed is None,  # resumed: the step count and the decay go on
    )
    return run.finish(model)


def research_env(
    config: TrainConfig,
    traces: Sequence[Trace],
    partners: Mapping[str, Policy],
    *,
    scales: Sequence[int] | None,
    like_testbed: float = 0.0,
    pool_reward: bool = False,
    random_free_units: bool = False,
) -> gym.Env:
    """`config`'s service on `traces` (ScalingEnv) in the wrappers of its research options: each
    episode's pool size from `scales`, its load from `config.loads` and the testbed's clients in a
    share `like_testbed` (EpisodeDraws), the shared pool with `partners` (SharedPool), the pool's
    reward with `pool_reward` (PoolReward), randomised free units with `random_free_units`."""
    env: gym.Env = ScalingEnv(config.service, traces, config.service_ratio,
                              total_units=config.total_units, profile=config.profile)
    if scales or config.loads or like_testbed:
        env = EpisodeDraws(env, scales=scales, loads=config.loads, like_testbed=like_testbed)
    if config.shared:
        env = SharedPool(env, partners)
    if pool_reward:
        env = PoolReward(env)
    if random_free_units:
        env = RandomFreeUnits(env)
    return env


def _require_tensorboard(tensorboard: str | None) -> None:
    if tensorboard is not None:
        try:
            import tensorboard as _tb  # noqa: F401  (sb3 writes its logs through it)
        except ImportError:
            raise MissingRequirement(
                "--tensorboard needs the tensorboard package: pip install 'testbed[drl]'"
            ) from None


def _resume_point(config: TrainConfig) -> tuple[Path | None, ModelMeta | None]:
    """With `resume`, the newest checkpoint and its manifest; it must have steps left to train."""
    if not config.resume:
        return None, None
    resume_from = latest_checkpoint(config.checkpoints, config.service)
    resumed = read_meta(resume_from)
    if resumed.steps >= config.steps:
        why = f"{resume_from} is at step {resumed.steps}: nothing left of --steps {config.steps}"
        raise ConfigError([ConfigProblem("--resume", None, "resume", why)])
    return resume_from, resumed


def _new_model(env: gym.Env, config: TrainConfig):  # type: ignore[no-untyped-def]
    """A fresh agent with the paper's network and PPO settings; the learning rate decays linearly."""
    import torch
    from sb3_contrib import MaskablePPO

    lr = config.learning_rate
    return MaskablePPO(
        "MlpPolicy",
        env,
        learning_rate=lambda remaining: lr * remaining,
        seed=config.seed,
        verbose=0,
        policy_kwargs={
            "net_arch": {"pi": list(paper.NET_ARCH), "vf": list(paper.NET_ARCH)},
            "activation_fn": torch.nn.ReLU,
        },
        tensorboard_log=config.tensorboard,
        device="cpu",
        **{**paper.PPO_PARAMS, **(config.ppo_params or {})},
    )


def _load_weights(model, init_from: str | Path) -> None:  # type: ignore[no-untyped-def]
    """Start `model` from the weights of model file `init_from`; inputs it lacks get zero weights."""
    import torch
    from sb3_contrib import MaskablePPO

    old = MaskablePPO.load(str(init_from), device="cpu").policy.state_dict()
    new = model.policy.state_dict()
    for k, v in old.items():
        if new[k].shape == v.shape:
            new[k] = v.clone()
        elif v.dim() == 2 and v.shape[0] == new[k].shape[0] and v.shape[1] < new[k].shape[1]:
            w = torch.zeros_like(new[k])  # first layer: the added inputs start at zero
            w[:, : v.shape[1]] = v
            new[k] = w
        else:
            raise ConfigError(
                [
                    ConfigProblem(
                        str(init_from), None, "init_from",
                        f"layer {k} {tuple(v.shape)} does not fit {tuple(new[k].shape)}",
                    )
                ]
            )
    model.policy.load_state_dict(new)


def _release_idle(  # type: ignore[no-untyped-def]
    model, config: TrainConfig, train_traces: Sequence[Trace], partners: dict[str, Policy],
) -> dict:
    """`release_below`: teach the starting agent to scale down at a light load; what it learnt."""

    teach_env = research_env(config, train_traces, partners, scales=config.scales)
    return asdict(distill_release(model, teach_env, config.release_below, seed=config.seed))


class _HeldLargest:
    """`hold_largest`: each checkpoint is a copy of the trained model fitted to act at the largest
    pool size as the starting agent does (testbed.train.distill.HeldScale)."""

    def __init__(  # type: ignore[no-untyped-def]
        self, model, env: gym.Env, config: TrainConfig, train_traces: Sequence[Trace],
        partners: dict[str, Policy],
    ):
        largest = max(config.scales)
        self.seed = config.seed
        self.held = HeldScale(
            model,
            ScalingEnv(config.service, train_traces,
                       config.service_ratio * largest / config.total_units,
                       total_units=largest, profile=config.profile),
            seed=config.seed,
        )
        self.own_env = research_env(config, train_traces, partners, scales=config.train_scales,
                                    like_testbed=config.like_testbed)
        self.fitted = _new_model(env, config)

    def fit(self, trained):  # type: ignore[no-untyped-def]
        """The fitted copy of `trained` and its HoldStats (as a dict)."""
        self.fitted.policy.load_state_dict(trained.policy.state_dict())
        return self.fitted, asdict(self.held.fit(self.fitted, self.own_env, seed=self.seed))


def _manifest(
    config: TrainConfig, env: ScalingEnv, train_traces: Sequence[Trace], val_traces: Sequence[Trace],
    partners: dict[str, Policy], distilled: dict | None, command: str | None,
) -> ModelMeta:
    """The manifest of the run's models, before any validation."""
    return ModelMeta(
        service=config.service,
        profile=env.profile.model_dump(exclude={"sources"}),
        ratio=config.service_ratio,
        total_units=config.total_units,
        train_traces=[t.name for t in train_traces],
        val_traces=[t.name for t in val_traces],
        seed=config.seed,
        steps=0,
        commit=git_commit() or "unknown",
        observation=OBSERVATION,
        command=rerunnable_command(command) if command else command,
        scales=sorted(set(config.scales)) if config.scales else None,
        loads=sorted(set(config.loads)) if config.loads else None,
        shared=config.shared,
        pool_reward=config.pool_reward,
        partners={s: str(Path(config.partners) / f"{s}.zip") for s in partners} or None,
        validate_pool=config.validate_pool,
        release_below=config.release_below,
        distilled=distilled,
        hold_largest=config.hold_largest,
        like_testbed=config.like_testbed,
    )


class _Run:
    """One training run's bookkeeping: its validations, the best model so far (written to `out`),
    the checkpoints, the learning curve and when to stop early."""

    def __init__(  # type: ignore[no-untyped-def]
        self, config: TrainConfig, out: Path, meta: ModelMeta, val_traces: Sequence[Trace],
        partners: dict[str, Policy], held: _HeldLargest | None,
        progress: Callable[[TrainingStatus], None] | None,
    ):
        self.config, self.out, self.meta, self.held, self.progress = config, out, meta, held, progress
        self.val_traces, self.partners = val_traces, partners
        self.checkpoints = None if config.checkpoints is None else Path(config.checkpoints)
        if self.checkpoints is not None:
            self.checkpoints.mkdir(parents=True, exist_ok=True)
        self.val_periods = episode_periods(
            config.service, val_traces[0], config.service_ratio, config.total_units, config.profile
        )
        self.episodes: list[tuple[int, float, int]] = []  # step at the end, reward, periods
        self.stale = 0  # validations since the best one

    def validate(self, model) -> float:  # type: ignore[no-untyped-def]
        c = self.config
        return validation_reward(
            model, c.service, self.val_traces, c.service_ratio, c.total_units, c.val_episodes,
            scales=c.scales, loads=c.loads, shared=c.shared,
            pool_reward=c.pool_reward or c.validate_pool, partners=self.partners,
            like_testbed=c.like_testbed > 0, profile=c.profile,
        )

    def candidate(self, model):  # type: ignore[no-untyped-def]
        """The model to validate and save for trained model `model`, with its HoldStats."""
        return (model, None) if self.held is None else self.held.fit(model)

    def restore(self, resumed: ModelMeta) -> None:
        """Go on from a resumed run: its validations, its best model, its curve."""
        meta, out = self.meta, self.out
        meta.validations = [(int(n), float(r)) for n, r in resumed.validations]  # JSON: lists
        meta.distilled = resumed.distilled
        meta.steps, meta.best_validation_reward = max(meta.validations, key=lambda v: v[1])
        best_at = meta.validations.index((meta.steps, meta.best_validation_reward))
        self.stale = len(meta.validations) - 1 - best_at
        best_file = self.checkpoints / f"{meta.service}-{meta.steps}.zip"
        if best_file.exists():
            shutil.copyfile(best_file, out)
            write_meta(out, meta)
        elif not out.exists():
            why = f"the best model so far (step {meta.steps}) is neither {out} nor {best_file}"
            raise ConfigError([ConfigProblem("--resume", None, "resume", why)])
        curve_json = curve_paths(out)[0]
        if curve_json.exists():
            self.episodes = [
                (e["step"], e["reward"], e["periods"])
                for e in json.loads(curve_json.read_text())["training"]
                if e["step"] <= resumed.steps
            ]

    def start_from(self, model) -> None:  # type: ignore[no-untyped-def]
        """Validate the starting model at step 0: a checkpoint must do better to be kept."""
        self.meta.best_validation_reward = self.validate(model)
        self.meta.validations.append((0, self.meta.best_validation_reward))
        save_model(model, self.out, self.meta)

    def on_step(self, n: int, infos, model, record: Callable[[str, float], None]) -> bool:  # type: ignore[no-untyped-def]
        """After training step `n`: note finished episodes, report, validate; False stops."""
        for info in infos:  # sb3's Monitor: an episode just ended
            if "episode" in info:
                self.episodes.append((n, float(info["episode"]["r"]), int(info["episode"]["l"])))
        if self.progress is not None and n % 256 == 0:
            self.progress(self.status(n))
        if n % self.config.validate_every:
            return True
        self.validate_at(n, model, record)
        c = self.config
        if c.stop_at is not None and n >= c.stop_at:
            return False
        return not (len(self.meta.validations) >= c.min_validations and self.stale >= c.patience)

    def status(self, n: int) -> TrainingStatus:
        recent, meta = self.episodes[-10:], self.meta
        return TrainingStatus(
            n,
            float(np.mean([r for _, r, _ in recent])) if recent else None,
            float(np.mean([length for _, _, length in recent])) if recent else None,
            meta.validations[-1][1] if meta.validations else None,
            meta.best_validation_reward,
            self.val_periods,
        )

    def validate_at(self, n: int, model, record: Callable[[str, float], None]) -> None:  # type: ignore[no-untyped-def]
        """Validate (the candidate of) `model` at step `n`; save it as a checkpoint, and to `out`
        if it is the best so far."""
        meta = self.meta
        candidate, stats = self.candidate(model)
        score = self.validate(candidate)
        meta.validations.append((n, score))
        if self.checkpoints is not None:
            mine = replace(
                meta, steps=n, best_validation_reward=score, validations=list(meta.validations),
                held=stats,
            )
            save_model(candidate, self.checkpoints / f"{meta.service}-{n}.zip", mine)
        record("validation/mean_reward", score)  # Figure 4.6 in TensorBoard
        if meta.best_validation_reward is None or score > meta.best_validation_reward:
            meta.best_validation_reward, meta.steps, meta.held, self.stale = score, n, stats, 0
            save_model(candidate, self.out, meta)
        else:
            self.stale += 1
        write_curve(self.out, meta, self.episodes, self.val_periods, plot=False)  # kept if cut off

    def finish(self, model) -> ModelMeta:  # type: ignore[no-untyped-def]
        """After training: the final manifest and the learning curve (and, with no validation
        yet, the trained model as the best)."""
        meta = self.meta
        if meta.best_validation_reward is None:  # budget shorter than one validation period
            candidate, meta.held = self.candidate(model)
            meta.best_validation_reward = self.validate(candidate)
            meta.validations.append((model.num_timesteps, meta.best_validation_reward))
            meta.steps = model.num_timesteps
            save_model(candidate, self.out, meta)
        else:
            write_meta(self.out, meta)  # every validation, also those after the best
        write_curve(self.out, meta, self.episodes, self.val_periods)
        return meta


def _callback(run: _Run):  # type: ignore[no-untyped-def]
    """sb3's callback that hands each training step to `run`."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Validate(BaseCallback):
        def _on_step(self) -> bool:
            return run.on_step(
                self.num_timesteps, self.locals.get("infos", ()), self.model, self.logger.record
            )

    return Validate()
