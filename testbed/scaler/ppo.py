"""Maskable PPO (sb3-contrib): training with validation and early stopping, and the policy wrapper.

Needs the `drl` extra (torch, gymnasium, stable-baselines3, sb3-contrib). A model file is
sb3's zip with one more member, `testbed.json` (the manifest: service, observation, profile,
traces, training command, seed, commit, steps, best validation reward); `train` also writes the
manifest beside the zip as SERVICE.json.
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from testbed.errors import ConfigError, ConfigProblem, MissingRequirement
from testbed.scaler.actions import Mask
from testbed.scaler.state import N_METRICS, OBSERVATION
from testbed.sim import paper
from testbed.sim.trace import Trace

META_MEMBER = "testbed.json"


def _require_drl():
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


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
            check=False,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def read_meta(path: str | Path) -> ModelMeta:
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
        _require_drl()
        from sb3_contrib import MaskablePPO

        model = MaskablePPO.load(str(path), device="cpu")
        shape = tuple(model.observation_space.shape or ())
        if shape != (N_METRICS * paper.HISTORY,):
            raise _problem(path, f"observation size {shape}, the scaler builds {N_METRICS * paper.HISTORY}")
        return cls(model, meta)

    def act(self, observation: np.ndarray, action_mask: Mask) -> int:
        action, _ = self.model.predict(
            np.asarray(observation, dtype=np.float32),
            action_masks=np.asarray(action_mask, dtype=bool),
            deterministic=True,
        )
        return int(action)


def validation_reward(
    model, service: str, traces: Sequence[Trace], ratio: float, total_units: int, episodes: int
) -> float:
    """Mean total episode reward of the deterministic agent (no free-unit randomisation)."""
    from testbed.sim.env import ScalingEnv

    env = ScalingEnv(service, traces, ratio, total_units=total_units, randomize_free_units=False)
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
) -> ModelMeta:
    """Train Maskable PPO as in Section 4.4.3 and write the best validated model to `out`.

    `stop_at` ends training after that many steps while the learning rate still decays over
    `steps` (a run cut short, reproducibly)."""
    _require_drl()
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback

    from testbed.sim.env import ScalingEnv

    if tensorboard is not None:
        try:
            import tensorboard as _tb  # noqa: F401  (sb3 writes its logs through it)
        except ImportError:
            raise MissingRequirement(
                "--tensorboard needs the tensorboard package: pip install 'testbed[drl]'"
            ) from None
    ratio = paper.DEFAULT_RATIOS[service] if ratio is None else ratio
    torch.set_num_threads(1)
    env = ScalingEnv(service, train_traces, ratio, total_units=total_units)
    lr = learning_rate
    model = MaskablePPO(
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
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = ModelMeta(
        service=service,
        profile=asdict(env.profile),
        ratio=ratio,
        total_units=total_units,
        train_traces=[t.name for t in train_traces],
        val_traces=[t.name for t in val_traces],
        seed=seed,
        steps=0,
        commit=git_commit(),
        observation=OBSERVATION,
        command=command,
    )

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
            score = validation_reward(self.model, service, val_traces, ratio, total_units, val_episodes)
            meta.validations.append((n, score))
            self.logger.record("validation/mean_reward", score)  # Figure 4.6 in TensorBoard
            if meta.best_validation_reward is None or score > meta.best_validation_reward:
                meta.best_validation_reward, meta.steps, self.stale = score, n, 0
                _save(self.model, out, meta)
            else:
                self.stale += 1
            if stop_at is not None and n >= stop_at:
                return False
            return not (len(meta.validations) >= min_validations and self.stale >= patience)

    model.learn(total_timesteps=steps, callback=Validate(), progress_bar=False)
    if meta.best_validation_reward is None:  # budget shorter than one validation period
        meta.best_validation_reward = validation_reward(
            model, service, val_traces, ratio, total_units, val_episodes
        )
        meta.validations.append((model.num_timesteps, meta.best_validation_reward))
        meta.steps = model.num_timesteps
        _save(model, out, meta)
    else:
        write_meta(out, meta)  # every validation, also those after the best
    return meta


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
