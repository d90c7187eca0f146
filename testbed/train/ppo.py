"""Maskable PPO training on the simulator (Section 4.4.3): validation, early stopping, the best
model written as sb3's zip plus the `testbed.json` member that testbed.scaler.ppo reads."""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from testbed.errors import ConfigError, ConfigProblem, MissingRequirement
from testbed.load.trace import Trace
from testbed.profiles import paper
from testbed.scaler.policies import Policy
from testbed.scaler.ppo import (
    META_MEMBER,
    MaskablePpoPolicy,
    ModelMeta,
    git_commit,
    read_meta,
    require_drl,
)
from testbed.scaler.state import OBSERVATION
from testbed.train.command import rerunnable_command
from testbed.train.env import ScalingEnv


def validation_reward(
    model,
    service: str,
    traces: Sequence[Trace],
    ratio: float,
    total_units: int,
    episodes: int,
    scales: Sequence[int] | None = None,
    loads: Sequence[float] | None = None,
    shared: bool = False,
    pool_reward: bool = False,
    partners: Mapping[str, Policy] | None = None,
    like_testbed: bool = False,
) -> float:
    """Mean total episode reward of the deterministic agent (no free-unit randomisation).

    With `scales`, the mean over the smallest and the largest pool size, `episodes` each (the
    ratio scaled with the units as in training). With `loads`, each load multiplier counts as a
    setup of its own at `total_units` (the largest scale stays at load 1); with `shared`, the
    `total_units` setups run the three services sharing the pool as Tables 5.1-5.2 do (ScalingEnv),
    the agent's own reward counted (the pool's, the three services', with `pool_reward`), the
    other services deciding with `partners` where given (rule v2 otherwise). With `like_testbed`,
    one more setup: `total_units` at load 1 with the clients and balancer of the local testbed
    (ScalingEnv's `like_testbed`), shared the same way."""
    if scales or loads or like_testbed:
        setups = [(total_units, load, False) for load in (loads or [1.0])]
        if like_testbed:
            setups.append((total_units, 1.0, True))
        if scales and max(scales) != total_units:
            setups.append((max(scales), 1.0, False))
        return float(
            np.mean(
                [
                    _episodes_reward(
                        model, service, traces, ratio * load * u / total_units, u, episodes,
                        shared and u == total_units, pool_reward, partners, testbed,
                    )
                    for u, load, testbed in setups
                ]
            )
        )
    return _episodes_reward(
        model, service, traces, ratio, total_units, episodes, shared, pool_reward, partners, False
    )


def _episodes_reward(
    model, service, traces, ratio, total_units, episodes, shared, pool_reward, partners, testbed,
) -> float:
    env = ScalingEnv(
        service, traces, ratio, total_units=total_units, randomize_free_units=False, shared=shared,
        pool_reward=pool_reward, partners=partners, like_testbed=1.0 if testbed else 0.0,
    )
    totals = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=10_000 + ep)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
            obs, r, term, trunc, _ = env.step(int(action))
            total += r
            done = term or trunc
        totals.append(total)
    return float(np.mean(totals))


REWARD_SCALE = (
    "an episode's reward is the sum of Eq. 3.2 over its periods (a validation: the mean of such "
    "sums over its episodes); divided by the periods of the episode it is the tables' per-period mean"
)


@dataclass
class TrainingStatus:
    """Where a training run stands, for its progress line."""

    steps: int
    episode_reward: float | None  # mean of the last finished training episodes (sums over periods)
    episode_periods: float | None  # their mean length
    last_validation: float | None
    best_validation: float | None
    validation_periods: int  # periods in one validation episode

    def line(self) -> str:
        """E.g. 'episode -31.2 (-1.04/period) | validation -254.5, best -250.1 (-0.088/period)'."""
        parts = []
        if self.episode_reward is not None and self.episode_periods:
            per = self.episode_reward / self.episode_periods
            parts.append(f"episode {self.episode_reward:.1f} ({per:.3f}/period)")
        if self.last_validation is not None and self.best_validation is not None:
            per = self.best_validation / self.validation_periods
            parts.append(
                f"validation {self.last_validation:.1f}, best {self.best_validation:.1f} "
                f"({per:.3f}/period over {self.validation_periods})"
            )
        return " | ".join(parts)


def episode_periods(service: str, trace: Trace, ratio: float, total_units: int) -> int:
    """The periods (agent steps) of one episode replaying `trace`: what a validation reward, a
    sum over an episode's periods, is divided by to read as the tables' per-period mean."""
    env = ScalingEnv(service, [trace], ratio, total_units=total_units, randomize_free_units=False)
    env.reset(seed=0)
    periods, done = 0, False
    while not done:
        mask = env.action_masks()
        _, _, term, trunc, _ = env.step(2 if mask[2] else int(np.argmax(mask)))  # hold if allowed
        periods, done = periods + 1, term or trunc
    return periods


def latest_checkpoint(folder: str | Path, service: str) -> Path:
    """The newest checkpoint of `service` in `folder` (SERVICE-STEPS.zip, the most steps)."""
    found = []
    for p in Path(folder).glob(f"{service}-*.zip"):
        step = p.stem.removeprefix(f"{service}-")
        if step.isdigit():
            found.append((int(step), p))
    if not found:
        why = f"no checkpoint {service}-STEPS.zip to resume from (train with --checkpoints first)"
        raise ConfigError([ConfigProblem(str(folder), None, "resume", why)])
    return max(found)[1]


def curve_paths(out: str | Path) -> tuple[Path, Path]:
    """Where the learning curve of model file `out` goes: OUT.curve.json and OUT.curve.png."""
    out = Path(out)
    return out.with_suffix(".curve.json"), out.with_suffix(".curve.png")


def write_curve(
    out: str | Path, meta: ModelMeta, episodes: Sequence[tuple[int, float, int]], validation_periods: int,
    plot: bool = True,
) -> None:
    """Write the learning curve beside model file `out`: the training episodes (step at its end,
    reward, periods) and the validations of `meta`, as JSON and (with `plot`) a PNG on the
    tables' per-period scale."""
    json_path, png_path = curve_paths(out)
    doc = {
        "service": meta.service,
        "reward_scale": REWARD_SCALE,
        "validation_periods": validation_periods,
        "training": [
            {"step": n, "reward": r, "periods": length, "per_period": r / length}
            for n, r, length in episodes
        ],
        "validation": [
            {"step": n, "reward": r, "per_period": r / validation_periods} for n, r in meta.validations
        ],
        "best": {"step": meta.steps, "reward": meta.best_validation_reward},
    }
    json_path.write_text(json.dumps(doc, indent=1) + "\n")
    if not plot:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    if episodes:
        ax.plot([e["step"] for e in doc["training"]], [e["per_period"] for e in doc["training"]],
                ".", ms=3, alpha=0.4, label="training episodes")
    ax.plot([v["step"] for v in doc["validation"]], [v["per_period"] for v in doc["validation"]],
            "o-", label=f"validation (sum / {validation_periods} periods)")
    ax.set_xlabel("training steps")
    ax.set_ylabel("reward per period (Eq. 3.2, the tables' scale)")
    ax.set_title(f"{meta.service}: learning curve (best at step {meta.steps})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)


def train(
    service: str,
    train_traces: Sequence[Trace],
    val_traces: Sequence[Trace],
    out: str | Path,
    *,
    ratio: float | None = None,
    total_units: int = paper.TOTAL_UNITS,
    steps: int = paper.MAX_TRAIN_STEPS,
    validate_every: int = paper.VALIDATION_EVERY,
    val_episodes: int = paper.VALIDATION_EPISODES,
    patience: int = paper.EARLY_STOP_PATIENCE,
    min_validations: int = paper.EARLY_STOP_MIN_VALIDATIONS,
    seed: int = 0,
    tensorboard: str | None = None,
    learning_rate: float = paper.LEARNING_RATE,
    ppo_params: dict | None = None,
    progress: Callable[[TrainingStatus], None] | None = None,
    command: str | None = None,
    stop_at: int | None = None,
    scales: Sequence[int] | None = None,
    init_from: str | Path | None = None,
    loads: Sequence[float] | None = None,
    shared: bool = False,
    pool_reward: bool = False,
    partners: str | Path | None = None,
    validate_pool: bool = False,
    checkpoints: str | Path | None = None,
    release_below: float | None = None,
    hold_largest: bool = False,
    like_testbed: float = 0.0,
    resume: bool = False,
) -> ModelMeta:
    """Train Maskable PPO as in Section 4.4.3 and write the best validated model to `out`.

    `stop_at` ends training after that many steps while the learning rate still decays over
    `steps` (a run cut short, reproducibly). `scales`: pool sizes drawn per episode, the ratio
    scaled with them (ScalingEnv); validation then averages the smallest and the largest.
    `init_from`: a model file whose weights start training (same 64x64 layers); one trained on
    fewer observation inputs (the 25-float observation before the unit-cost cue) gets zero
    weights on the new inputs, so training starts from its policy at every pool size; its own
    validation is then the first one (step 0), so a checkpoint is kept only if it validates
    better than the model it started from. `loads` and `shared`: see ScalingEnv (the 8-unit
    episodes at several load multipliers, the three services sharing the pool); validation
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
    balancer (ScalingEnv); validation then adds that setup at `total_units`, load 1.
    `resume` (needs `checkpoints`): go on from the newest checkpoint there (its weights, step
    count and validations; `init_from` and `release_below` were applied before it) up to `steps`.
    `progress` is called every 256 steps with a TrainingStatus. Beside `out` goes its learning
    curve (curve_paths: training episodes and validations, JSON and PNG)."""
    require_drl()
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback

    if tensorboard is not None:
        try:
            import tensorboard as _tb  # noqa: F401  (sb3 writes its logs through it)
        except ImportError:
            raise MissingRequirement(
                "--tensorboard needs the tensorboard package: pip install 'testbed[drl]'"
            ) from None
    if release_below is not None and not init_from:
        why = "releasing idle instances is taught to a trained agent: add --init-from"
        raise ConfigError([ConfigProblem("--release-below", None, "release_below", why)])
    if hold_largest and not (init_from and scales and len(set(scales)) >= 2):
        why = "holding the largest pool size needs a starting agent and two sizes: --init-from, --scales"
        raise ConfigError([ConfigProblem("--hold-largest", None, "hold_largest", why)])
    if not 0 <= like_testbed <= 1:
        why = f"{like_testbed:g}: a share of episodes, between 0 and 1"
        raise ConfigError([ConfigProblem("--like-testbed", None, "like_testbed", why)])
    if resume and checkpoints is None:
        why = "resuming continues from the checkpoints of a run: add --checkpoints DIR"
        raise ConfigError([ConfigProblem("--resume", None, "resume", why)])
    if resume and hold_largest:
        why = "a --hold-largest checkpoint is the fitted copy, not the model PPO goes on from"
        raise ConfigError([ConfigProblem("--resume", None, "resume", why)])
    resume_from = latest_checkpoint(checkpoints, service) if resume else None
    resumed = read_meta(resume_from) if resume_from else None
    if resumed is not None and resumed.steps >= steps:
        why = f"{resume_from} is at step {resumed.steps}: nothing left of --steps {steps}"
        raise ConfigError([ConfigProblem("--resume", None, "resume", why)])
    train_scales = [u for u in scales if u != max(scales)] if hold_largest else scales
    ratio = paper.DEFAULT_RATIOS[service] if ratio is None else ratio
    partner_policies = load_partners(partners, service)
    torch.set_num_threads(1)
    env = ScalingEnv(
        service, train_traces, ratio, total_units=total_units, scales=train_scales, loads=loads,
        shared=shared, pool_reward=pool_reward, partners=partner_policies, like_testbed=like_testbed,
    )
    lr = learning_rate

    def new_model():
        return MaskablePPO(
            "MlpPolicy",
            env,
            learning_rate=lambda remaining: lr * remaining,
            seed=seed,
            verbose=0,
            policy_kwargs={
                "net_arch": {"pi": list(paper.NET_ARCH), "vf": list(paper.NET_ARCH)},
                "activation_fn": torch.nn.ReLU,
            },
            tensorboard_log=tensorboard,
            device="cpu",
            **{**paper.PPO_PARAMS, **(ppo_params or {})},
        )

    model = new_model()
    if resume_from is not None:
        model = MaskablePPO.load(str(resume_from), env=env, device="cpu", tensorboard_log=tensorboard)
    elif init_from:
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
    distilled = None
    if release_below is not None and resumed is None:
        from testbed.train.distill import distill_release

        teach_env = ScalingEnv(
            service, train_traces, ratio, total_units=total_units, randomize_free_units=False,
            scales=scales, loads=loads, shared=shared, partners=partner_policies,
        )
        distilled = asdict(distill_release(model, teach_env, release_below, seed=seed))
    held = None
    if hold_largest:
        from testbed.train.distill import HeldScale

        largest = max(scales)
        held = HeldScale(
            model,
            ScalingEnv(
                service, train_traces, ratio * largest / total_units, total_units=largest,
                randomize_free_units=False,
            ),
            seed=seed,
        )
        own_env = ScalingEnv(
            service, train_traces, ratio, total_units=total_units, randomize_free_units=False,
            scales=train_scales, loads=loads, shared=shared, partners=partner_policies,
            like_testbed=like_testbed,
        )
        fitted = new_model()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = ModelMeta(
        service=service,
        profile=env.profile.model_dump(exclude={"sources"}),
        ratio=ratio,
        total_units=total_units,
        train_traces=[t.name for t in train_traces],
        val_traces=[t.name for t in val_traces],
        seed=seed,
        steps=0,
        commit=git_commit(),
        observation=OBSERVATION,
        command=rerunnable_command(command) if command else command,
        scales=sorted(set(scales)) if scales else None,
        loads=sorted(set(loads)) if loads else None,
        shared=shared,
        pool_reward=pool_reward,
        partners={s: str(Path(partners) / f"{s}.zip") for s in partner_policies} or None,
        validate_pool=validate_pool,
        release_below=release_below,
        distilled=distilled,
        hold_largest=hold_largest,
        like_testbed=like_testbed,
    )
    if checkpoints is not None:
        checkpoints = Path(checkpoints)
        checkpoints.mkdir(parents=True, exist_ok=True)

    def validate(m) -> float:
        return validation_reward(
            m, service, val_traces, ratio, total_units, val_episodes, scales, loads, shared,
            pool_reward or validate_pool, partner_policies, like_testbed > 0,
        )

    val_periods = episode_periods(service, val_traces[0], ratio, total_units)
    episodes: list[tuple[int, float, int]] = []  # training episodes: step at the end, reward, periods
    stale = 0
    if resumed is not None:  # the run so far: its validations, its best model, its curve
        meta.validations = [(int(n), float(r)) for n, r in resumed.validations]  # JSON: lists
        meta.distilled = resumed.distilled
        meta.steps, meta.best_validation_reward = max(meta.validations, key=lambda v: v[1])
        stale = len(meta.validations) - 1 - meta.validations.index((meta.steps, meta.best_validation_reward))
        best_file = checkpoints / f"{service}-{meta.steps}.zip"
        if best_file.exists():
            shutil.copyfile(best_file, out)
            write_meta(out, meta)
        elif not out.exists():
            why = f"the best model so far (step {meta.steps}) is neither {out} nor {best_file}"
            raise ConfigError([ConfigProblem("--resume", None, "resume", why)])
        curve_json = curve_paths(out)[0]
        if curve_json.exists():
            episodes = [
                (e["step"], e["reward"], e["periods"])
                for e in json.loads(curve_json.read_text())["training"]
                if e["step"] <= resumed.steps
            ]
    elif init_from:  # the starting model is the one to beat
        meta.best_validation_reward = validate(model)
        meta.validations.append((0, meta.best_validation_reward))
        _save(model, out, meta)

    def checkpoint(m):
        """The model to validate and save for trained model `m`, with its HoldStats."""
        if held is None:
            return m, None
        fitted.policy.load_state_dict(m.policy.state_dict())
        return fitted, asdict(held.fit(fitted, own_env, seed=seed))

    class Validate(BaseCallback):
        def __init__(self):
            super().__init__()
            self.stale = stale

        def _on_step(self) -> bool:
            n = self.num_timesteps
            for info in self.locals.get("infos", ()):  # sb3's Monitor: an episode just ended
                if "episode" in info:
                    episodes.append((n, float(info["episode"]["r"]), int(info["episode"]["l"])))
            if progress is not None and n % 256 == 0:
                recent = episodes[-10:]
                progress(
                    TrainingStatus(
                        n,
                        float(np.mean([r for _, r, _ in recent])) if recent else None,
                        float(np.mean([length for _, _, length in recent])) if recent else None,
                        meta.validations[-1][1] if meta.validations else None,
                        meta.best_validation_reward,
                        val_periods,
                    )
                )
            if n % validate_every:
                return True
            candidate, stats = checkpoint(self.model)
            score = validate(candidate)
            meta.validations.append((n, score))
            if checkpoints is not None:
                mine = replace(
                    meta, steps=n, best_validation_reward=score, validations=list(meta.validations),
                    held=stats,
                )
                _save(candidate, checkpoints / f"{service}-{n}.zip", mine)
            self.logger.record("validation/mean_reward", score)  # Figure 4.6 in TensorBoard
            if meta.best_validation_reward is None or score > meta.best_validation_reward:
                meta.best_validation_reward, meta.steps, meta.held, self.stale = score, n, stats, 0
                _save(candidate, out, meta)
            else:
                self.stale += 1
            write_curve(out, meta, episodes, val_periods, plot=False)  # kept if the run is cut off
            if stop_at is not None and n >= stop_at:
                return False
            return not (len(meta.validations) >= min_validations and self.stale >= patience)

    model.learn(
        total_timesteps=steps - (resumed.steps if resumed else 0),
        callback=Validate(),
        progress_bar=False,
        reset_num_timesteps=resumed is None,  # resumed: the step count and the decay go on
    )
    if meta.best_validation_reward is None:  # budget shorter than one validation period
        candidate, meta.held = checkpoint(model)
        meta.best_validation_reward = validate(candidate)
        meta.validations.append((model.num_timesteps, meta.best_validation_reward))
        meta.steps = model.num_timesteps
        _save(candidate, out, meta)
    else:
        write_meta(out, meta)  # every validation, also those after the best
    write_curve(out, meta, episodes, val_periods)
    return meta


def load_partners(folder: str | Path | None, service: str) -> dict[str, Policy]:
    """The agents in `folder` (SERVICE.zip) for the paper's services other than `service`; each
    is checked as `sim tables` checks a model (a missing file or another service's agent is one
    ConfigError naming it)."""
    if folder is None:
        return {}
    return {
        s: MaskablePpoPolicy.load(Path(folder) / f"{s}.zip", s)
        for s in paper.TEST_SHIFT_HOURS
        if s != service
    }


def write_meta(path: str | Path, meta: ModelMeta) -> None:
    """Replace the manifest in model file `path` and beside it (SERVICE.json)."""
    path = Path(path)
    text = json.dumps(asdict(meta), indent=2)
    tmp = path.with_suffix(".tmp.zip")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            if item.filename != META_MEMBER:
                dst.writestr(item, src.read(item))
        dst.writestr(META_MEMBER, text)
    tmp.replace(path)
    path.with_suffix(".json").write_text(text + "\n")


def _save(model, out: Path, meta: ModelMeta) -> None:
    text = json.dumps(asdict(meta), indent=2)
    tmp = out.with_suffix(".tmp.zip")
    model.save(str(tmp))
    with zipfile.ZipFile(tmp, "a") as zf:
        zf.writestr(META_MEMBER, text)
    tmp.replace(out)
    out.with_suffix(".json").write_text(text + "\n")
