"""Maskable PPO training on the simulator (Section 4.4.3): a TrainConfig made into the research
options' wrappers around ScalingEnv and sb3 callbacks for validation, early stopping and the best
model, written as sb3's zip plus the `testbed.json` member that testbed.scaler.ppo reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from testbed.errors import ConfigError, ConfigProblem, MissingRequirement
from testbed.load.trace import Trace
from testbed.paths import git_commit
from testbed.profiles import paper
from testbed.scaler.policies import Policy
from testbed.scaler.ppo import require_drl
from testbed.scaler.state import OBSERVATION
from testbed.train.command import rerunnable_command
from testbed.train.config import TrainConfig
from testbed.train.curve import TrainingStatus, curve_paths
from testbed.train.distill import HeldScale, distill_release
from testbed.train.env import ScalingEnv
from testbed.train.model_file import (
    ModelMeta,
    latest_checkpoint,
    load_partners,
    read_meta,
    save_model,
    write_meta,
)
from testbed.train.options import PpoOptions
from testbed.train.validation import episode_periods, episodes_reward, validation_reward
from testbed.train.wrappers import Research

if TYPE_CHECKING:
    from stable_baselines3.common.callbacks import BaseCallback

    from testbed.train.callbacks import LearningCurve, Validation

__all__ = [
    "TrainConfig", "curve_paths", "load_partners", "research_env", "train", "validation_reward",
    "write_meta",
]

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
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
    callbacks: Sequence[BaseCallback] = (),
    **options,
) -> ModelMeta:
    """Train Maskable PPO as in Section 4.4.3 as `config` says on `train_traces`, validating on
    `val_traces`, and write the best validated model to `out`. `config` may also be the service's
    name with TrainConfig's fields as keywords (`options`).

    The training environment is ScalingEnv in the wrappers of `config`'s research options
    (testbed.train.wrappers), then in each of `wrappers` in turn (a user's own, e.g. a class of
    gymnasium.Wrapper); sb3 calls the callbacks of `config` (testbed.train.callbacks), then
    `callbacks` (sb3 BaseCallbacks of a user's own) at each step. Validation runs environments of
    its own. `command` is the command line the manifest records (rerunnable_command). `progress`
    is called every 256 steps with a TrainingStatus. Beside `out` goes its learning curve
    (curve_paths: training episodes and validations, JSON and PNG)."""
    if not isinstance(config, TrainConfig):
        config = TrainConfig(service=config, **options)
    require_drl()
    import torch

    _require_tensorboard(config.tensorboard)
    resume_from, resumed = _resume_point(config)
    partners = load_partners(config.partners, config.service)
    torch.set_num_threads(1)
    env = research_env(config, train_traces, config.research(partners))
    for wrap in wrappers:
        env = wrap(env)
    model = _starting_model(env, config, resume_from)
    distilled = None
    if config.release_below is not None and resumed is None:
        distilled = _release_idle(model, config, train_traces, partners)
    held = _hold_largest(model, env, config, train_traces, partners) if config.hold_largest else None
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = _manifest(config, env.unwrapped, train_traces, val_traces, partners, distilled, command)
    curve, validation = _callbacks(config, out, meta, val_traces, partners, held, progress)
    if resumed is not None:
        validation.restore(resumed, config.checkpoints)
        curve.restore(resumed.steps)
    elif config.init_from:  # the starting model is the one to beat
        validation.start_from(model)
    model.learn(
        total_timesteps=config.steps - (resumed.steps if resumed else 0),
        callback=[curve, validation, *callbacks],
        progress_bar=False,
        reset_num_timesteps=resumed is None,  # resumed: the step count and the decay go on
    )
    return validation.meta


def _starting_model(env: gym.Env, config: TrainConfig, resume_from: Path | None) -> Any:
    """The model training starts from: a checkpoint's to resume, else a new one (with the
    weights of `config.init_from` where given)."""
    model = _new_model(env, config)
    if resume_from is not None:
        from sb3_contrib import MaskablePPO

        return MaskablePPO.load(str(resume_from), env=env, device="cpu",
                                tensorboard_log=config.tensorboard)
    if config.init_from:
        _load_weights(model, config.init_from)
    return model


def research_env(config: TrainConfig, traces: Sequence[Trace], research: Research) -> gym.Env:
    """`config`'s service on `traces` (ScalingEnv) in `research`'s wrappers (TrainConfig.research)."""
    return research.wrap(ScalingEnv(config.service, traces, config.service_ratio,
                                    total_units=config.total_units, profile=config.profile))


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
        **{**paper.PPO_PARAMS, **({"ent_coef": config.ent_coef} if config.ent_coef else {}),
           **(config.ppo_params or {})},
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

    teach_env = research_env(config, train_traces, config.research(partners, "release"))
    return asdict(distill_release(model, teach_env, config.release_below, seed=config.seed))


def _hold_largest(  # type: ignore[no-untyped-def]
    model, env: gym.Env, config: TrainConfig, train_traces: Sequence[Trace],
    partners: dict[str, Policy],
) -> dict[str, Any]:
    """`hold_largest`'s parts of HoldLargest: the starting agent's behaviour at the largest pool
    size, the environment of the trained sizes, and the model that takes the fitted copies."""
    largest = max(config.scales)
    held = HeldScale(
        model,
        ScalingEnv(config.service, train_traces, config.service_ratio * largest / config.total_units,
                   total_units=largest, profile=config.profile),
        seed=config.seed,
    )
    own_env = research_env(config, train_traces, config.research(partners, "hold"))
    return {"held": held, "own_env": own_env, "fitted": _new_model(env, config), "seed": config.seed}


def _manifest(
    config: TrainConfig, env: ScalingEnv, train_traces: Sequence[Trace], val_traces: Sequence[Trace],
    partners: dict[str, Policy], distilled: dict | None, command: str | None,
) -> ModelMeta:
    """The manifest of the run's models, before any validation: the config's research options as
    the run holds them, plus what it is trained on and with (results come with validation)."""
    options = {f.name: getattr(config, f.name) for f in fields(PpoOptions)}
    return ModelMeta(
        **{k: str(v) if isinstance(v, Path) else v for k, v in options.items()},
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
        distilled=distilled,
    )


def _callbacks(
    config: TrainConfig, out: Path, meta: ModelMeta, val_traces: Sequence[Trace],
    partners: dict[str, Policy], held: dict[str, Any] | None,
    progress: Callable[[TrainingStatus], None] | None,
) -> tuple[LearningCurve, Validation]:
    """`config`'s callbacks: the learning curve, and the validation (HoldLargest's with `held`)
    followed by the checkpoints, the stop at `stop_at` and early stopping."""
    # sb3's callbacks: imported once train() has checked that the drl extra is there
    from stable_baselines3.common.callbacks import CallbackList

    from testbed.train.callbacks import (
        Checkpoints,
        EarlyStopping,
        HoldLargest,
        LearningCurve,
        StopAt,
        Validation,
    )

    c = config
    val_periods = episode_periods(c.service, val_traces[0], c.service_ratio, c.total_units, c.profile)
    curve = LearningCurve(out, meta, val_periods, progress=progress)
    after = [] if c.checkpoints is None else [Checkpoints(c.checkpoints)]
    if c.stop_at is not None:
        after.append(StopAt(c.stop_at))
    after.append(EarlyStopping(c.patience, c.min_validations))

    research = c.research(partners, "validate")

    def score(model) -> float:  # type: ignore[no-untyped-def]
        return validation_reward(model, c.service, val_traces, c.service_ratio, c.total_units,
                                 c.val_episodes, research, profile=c.profile)

    kind, extra = (Validation, {}) if held is None else (HoldLargest, held)
    validation = kind(score, out, meta, every=c.validate_every, curve=curve,
                      callback=CallbackList(after), **extra)
    return curve, validation
