"""Maskable PPO training on the simulator (Section 4.4.3): validation, early stopping, the best
model written as sb3's zip plus the `testbed.json` member that testbed.scaler.ppo reads."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from testbed.errors import ConfigError, ConfigProblem, MissingRequirement
from testbed.load.trace import Trace
from testbed.profiles import paper
from testbed.scaler.policies import Policy
from testbed.scaler.ppo import META_MEMBER, MaskablePpoPolicy, ModelMeta, git_commit, require_drl
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
    progress: Callable[[int, float | None], None] | None = None,
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
    balancer (ScalingEnv); validation then adds that setup at `total_units`, load 1."""
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
    if init_from:
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
    if release_below is not None:
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

    if init_from:  # the starting model is the one to beat
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
            self.stale = 0

        def _on_step(self) -> bool:
            n = self.num_timesteps
            if progress is not None and n % 256 == 0:
                progress(n, meta.best_validation_reward)
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
            if stop_at is not None and n >= stop_at:
                return False
            return not (len(meta.validations) >= min_validations and self.stale >= patience)

    model.learn(total_timesteps=steps, callback=Validate(), progress_bar=False)
    if meta.best_validation_reward is None:  # budget shorter than one validation period
        candidate, meta.held = checkpoint(model)
        meta.best_validation_reward = validate(candidate)
        meta.validations.append((model.num_timesteps, meta.best_validation_reward))
        meta.steps = model.num_timesteps
        _save(candidate, out, meta)
    else:
        write_meta(out, meta)  # every validation, also those after the best
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
