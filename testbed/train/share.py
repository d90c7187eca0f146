"""Training the share allocators (`ddpg`: sb3 DDPG, the slides' algorithm; `inss`: sb3 TD3, InSS's
local-stage algorithm) on the GPU simulator; the env is a Gymnasium adapter over GpuSimCluster.

Episodes are random windows of the training days (each service shifted 0/8/16 h as on the test
day) at a load drawn around Table 5.1's (or, with `load_scales`, at a multiple of it drawn
log-uniformly between two ends, validated at both); the reward is the comparison's: the mean over services of
-(0.9 SLO violation rate + 0.1 share units / cluster units). Validation: the whole validation day
(day 6) at Table 5.1's load; the best validated actor is kept. Budgets are small on purpose (this
machine: two shared cores), minutes, not the papers' hours.
"""

from __future__ import annotations

import json
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

import gymnasium as gym
import numpy as np

from testbed.load.trace import Trace
from testbed.paths import git_commit
from testbed.profiles import ServiceProfile, paper
from testbed.profiles.paper import REWARD_ALPHA, REWARD_BETA, TEST_SHIFT_HOURS
from testbed.scaler.ppo import require_drl
from testbed.scaler.share import META_MEMBER, ShareMapper, ShareMeta
from testbed.scaler.target import cluster_view
from testbed.sim.gpu import UNIT_PCT, GpuSimCluster
from testbed.train.command import rerunnable_command
from testbed.train.trainers import TRAINERS


class ShareEnv(gym.Env):
    """Observation: ShareMapper.observe; action: Box(0, 1); reward: the comparison's."""

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium's convention)

    def __init__(
        self,
        mapper: ShareMapper,
        days: Sequence[Trace],
        ratios: Mapping[str, float],
        *,
        gpus: int = 2,
        episode_steps: int | None = 240,
        load_jitter: float = 0.3,
        interference: bool = True,
        load_scales: tuple[float, float] | None = None,
    ):
        super().__init__()
        self.mapper = mapper
        self.days = list(days)
        self.ratios = dict(ratios)
        self.gpus = gpus
        self.episode_steps = episode_steps
        self.load_jitter = load_jitter
        self.load_scales = load_scales
        self.interference = interference
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(mapper.obs_size,), dtype=np.float32)
        self.action_space = gym.spaces.Box(0.0, 1.0, shape=(mapper.action_size,), dtype=np.float32)
        self._cluster: GpuSimCluster | None = None
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        day = self.days[int(self.np_random.integers(len(self.days)))]
        if self.episode_steps is None:
            start, duration = 0.0, None
        else:
            step = paper.STEP_SECONDS
            duration = (self.episode_steps + 1) * step
            start = float(self.np_random.integers(0, max(1, int((day.seconds - duration) // step)))) * step
        scale = 1.0 + self.load_jitter * (2 * self.np_random.random() - 1) if self.load_jitter else 1.0
        if self.load_scales is not None:
            lo, hi = np.log(self.load_scales[0]), np.log(self.load_scales[1])
            scale = float(np.exp(lo + (hi - lo) * self.np_random.random()))
        services = self.mapper.services
        traces = {
            s: day.window(shift_hours=TEST_SHIFT_HOURS.get(s, 0), start=start, duration=duration)
            for s in services
        }
        self._cluster = GpuSimCluster(
            self.mapper.profiles,
            traces,
            {s: self.ratios[s] * scale for s in services},
            gpus=self.gpus,
            seed=int(self.np_random.integers(2**31)),
            interference=self.interference,
        )
        self._steps = 0
        windows = self._cluster.advance()
        return self.mapper.observe(cluster_view(self._cluster, windows)), {}

    def step(self, action):
        c = self._cluster
        assert c is not None, "call reset() first"
        view = cluster_view(c, {s: c.latest_window(s) for s in self.mapper.services})
        for s, target in self.mapper.targets(np.asarray(action), view).items():
            c.configure(s, target)
        windows = c.advance()
        total_units = c.total_units()
        r = float(np.mean([
            -(REWARD_ALPHA * windows[s].slo_violation_rate
              + REWARD_BETA * c.share_used_pct(s) / UNIT_PCT / total_units)
            for s in self.mapper.services
        ]))
        self._steps += 1
        done = c.done or (self.episode_steps is not None and self._steps >= self.episode_steps)
        obs = self.mapper.observe(cluster_view(c, windows))
        return obs, r, False, done, {}

    def close(self) -> None:
        self._cluster = None


def validate(model, env: ShareEnv, seed: int = 10_000) -> float:
    """Mean reward per step of the deterministic actor over one whole episode."""
    obs, _ = env.reset(seed=seed)
    total, n, done = 0.0, 0, False
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        obs, r, term, trunc, _ = env.step(action)
        total += r
        n += 1
        done = term or trunc
    return total / max(n, 1)


def train_share(
    kind: str,
    profiles: Mapping[str, ServiceProfile],
    train_days: Sequence[Trace],
    val_days: Sequence[Trace],
    ratios: Mapping[str, float],
    out: str | Path,
    *,
    gpus: int = 2,
    steps: int = 12_000,
    validate_every: int = 4_000,
    seed: int = 0,
    command: str = "",
    progress: Callable[[int, float | None], None] | None = None,
    load_scales: tuple[float, float] | None = None,
) -> ShareMeta:
    require_drl()
    import torch

    torch.set_num_threads(1)
    mapper = ShareMapper(kind, profiles)
    env = ShareEnv(mapper, train_days, ratios, gpus=gpus, load_scales=load_scales)
    val_envs = [
        ShareEnv(mapper, val_days, {s: r * k for s, r in ratios.items()}, gpus=gpus, episode_steps=None,
                 load_jitter=0.0)
        for k in (load_scales or (1.0,))
    ]
    model = _new_model(kind, env, mapper.action_size, seed)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = ShareMeta(
        kind=kind,
        services=list(profiles),
        gpus=gpus,
        ratios=dict(ratios),
        algorithm=TRAINERS[kind].algorithm,
        command=rerunnable_command(command) if command else command,
        seed=seed,
        steps=0,
        commit=git_commit() or "unknown",
        train_traces=[t.name for t in train_days],
        val_traces=[t.name for t in val_days],
        load_scales=list(load_scales) if load_scales else None,
    )
    started = time.perf_counter()
    callback = _keep_best(val_envs, validate_every, meta, out, started, progress)
    model.learn(total_timesteps=steps, callback=callback, progress_bar=False)
    if meta.best_validation_reward is None:
        meta.best_validation_reward = float(np.mean([validate(model, v) for v in val_envs]))
        meta.validations.append((model.num_timesteps, meta.best_validation_reward))
        meta.steps = model.num_timesteps
        meta.train_seconds = time.perf_counter() - started
        save_share_model(model, out, meta)
    update_manifest(out, meta)
    return meta


def _new_model(kind: str, env: ShareEnv, n_act: int, seed: int):
    """An untrained sb3 DDPG (`ddpg`) or TD3 (`inss`) actor-critic on `env`, on the CPU."""
    from stable_baselines3 import DDPG, TD3
    from stable_baselines3.common.noise import NormalActionNoise

    algo = DDPG if kind == "ddpg" else TD3
    # inss: InSS Table 2's TD3 learning rate, mini-batch and exploration noise (its 256-unit layers
    # and gamma 0.99 are not taken: 64x64 and 0.9 as ddpg, for minutes on two shared cores)
    lr, batch, noise = (3e-4, 256, 0.1) if kind == "inss" else (1e-3, 128, 0.15)
    return algo(
        "MlpPolicy",
        env,
        learning_rate=lr,
        buffer_size=50_000,
        learning_starts=500,
        batch_size=batch,
        gamma=0.9,
        action_noise=NormalActionNoise(np.zeros(n_act), noise * np.ones(n_act)),
        policy_kwargs={"net_arch": [64, 64]},
        seed=seed,
        device="cpu",
        verbose=0,
    )


def _keep_best(
    val_envs: list[ShareEnv],
    validate_every: int,
    meta: ShareMeta,
    out: Path,
    started: float,
    progress: Callable[[int, float | None], None] | None,
):
    """An sb3 callback that reports progress every 100 steps and, every `validate_every`, validates
    the actor and saves it to `out` when it beats the best so far (recorded in `meta`)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Validate(BaseCallback):
        def _on_step(self) -> bool:
            n = self.num_timesteps
            if progress is not None and n % 100 == 0:
                progress(n, meta.best_validation_reward)
            if n % validate_every:
                return True
            score = float(np.mean([validate(self.model, v) for v in val_envs]))
            meta.validations.append((n, score))
            if meta.best_validation_reward is None or score > meta.best_validation_reward:
                meta.best_validation_reward, meta.steps = score, n
                meta.train_seconds = time.perf_counter() - started
                save_share_model(self.model, out, meta)
            return True

    return Validate()


def save_share_model(model, out: Path, meta: ShareMeta) -> None:
    tmp = out.with_suffix(".tmp.zip")
    model.save(str(tmp))
    with zipfile.ZipFile(tmp, "a") as zf:
        zf.writestr(META_MEMBER, json.dumps(asdict(meta), indent=2))
    tmp.replace(out)


def update_manifest(model_path: Path, meta: ShareMeta) -> None:
    """models/manifest.json: one entry per model file beside it (command, seed, commit, steps,
    best validation reward)."""
    path = model_path.parent / "manifest.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        data = {}
    entry = asdict(meta)
    entry.pop("validations")
    entry["validations"] = [list(v) for v in meta.validations]
    data[model_path.name] = entry
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
