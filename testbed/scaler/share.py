"""Continuous GPU-share allocators as target policies: `ddpg` (the DDPG-MPS slides, papers/004) and
`inss` (InSS's two-stage scheduler, papers/001 Section 5), each an sb3 actor plus one mapping.

Both see, per service: load (request rate x mean batch-1 time at DRAFAS's share, in units, over the
cluster's units), SLO violation rate, instance utilization, share held (in units over the cluster's
units) and batch size (over the profile's max) — 5 floats per service.

ddpg's action (the slides): one weight per service, normalised to shares of the GPU capacity
(GPU% = 100 act_i / sum act), plus one more output, the fraction of the cluster to use (added:
the slides always hand out 100 %, our reward charges for share). Batch stays 1 (the slides do not
batch). inss's action (InSS's local stage, TD3): the same softmax-like share split, of the whole
cluster (InSS's softmax makes each GPU's allocations sum to 100 %, and its objective is throughput:
it does not price share), plus a batch size per service; its global stage (placement,
SAC-Discrete in the paper) is replaced by an interference-aware greedy rule: a new instance goes to
the GPU with the most free share, where its neighbours press least (sb3 has no SAC-Discrete; see
docs/seeds.md).

A service's share S becomes ceil(S / knee) instances (more than the knee buys nothing) of S / n
each, rounded to 5 % (MPS works in SM steps); a change of less than 10 points keeps the running
share, so the policy does not restart replicas for noise.
"""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from testbed.cluster.base import ServiceTarget
from testbed.errors import ConfigError, ConfigProblem
from testbed.paths import MODELS_DIR
from testbed.profiles import PACKAGED_PROFILES, ServiceProfile
from testbed.scaler.fa2 import require_curves
from testbed.scaler.ppo import META_MEMBER, require_drl
from testbed.scaler.target import ClusterView

KINDS = ("ddpg", "inss")
OBS_PER_SERVICE = 5
SHARE_STEP_PCT = 5.0
DEADBAND_PCT = 10.0
MIN_TOTAL = 0.05  # the smallest fraction of the cluster the total output can ask for


def default_model(kind: str) -> Path:
    """The shipped model of a share policy: models/inss.zip, models/ddpg.zip.

    kind: "inss" or "ddpg"."""
    return MODELS_DIR / f"{kind}.zip"


@dataclass
class ShareMeta:
    """What a ddpg/inss model file says about itself (also a line of models/manifest.json)."""

    kind: str
    services: list[str]
    gpus: int
    ratios: dict[str, float]
    algorithm: str
    command: str
    seed: int
    steps: int
    commit: str
    train_traces: list[str]
    val_traces: list[str]
    best_validation_reward: float | None = None
    load_scales: list[float] | None = None  # training loads, x Table 5.1's ratios (None: 1 +- 30 %)
    validations: list[tuple[int, float]] = field(default_factory=list)
    train_seconds: float = 0.0


class ShareMapper:
    """Observation and action <-> targets, shared by the env (training) and the policy (use)."""

    def __init__(self, kind: str, profiles: Mapping[str, ServiceProfile], *, profile_source: str = ""):
        if kind not in KINDS:
            raise ConfigError([ConfigProblem("<policy>", None, "policy", f"unknown share policy {kind!r}")])
        require_curves(profiles, kind, profile_source or PACKAGED_PROFILES)
        self.kind = kind
        self.profiles = dict(profiles)
        self.services = list(profiles)

    @property
    def obs_size(self) -> int:
        """Values in an observation: OBS_PER_SERVICE per service."""
        return OBS_PER_SERVICE * len(self.services)

    @property
    def action_size(self) -> int:
        """Values in an action: a weight per service, plus the total (ddpg) or a batch per service
        (inss)."""
        n = len(self.services)
        return n + 1 if self.kind == "ddpg" else 2 * n

    def observe(self, view: ClusterView) -> np.ndarray:
        """The observation of `view`: per service its load, SLO violation rate, utilization, share used
        and batch, each in 0..1."""
        total_units = len(view.gpu_free_pct) * 100.0 / view.unit_pct
        out = []
        for s in self.services:
            v = view.services[s]
            prof = self.profiles[s]
            load_units = v.window.request_rate * prof.mean_proc_time_ms / 1000.0
            out += [
                min(load_units / total_units, 1.0),
                min(v.window.slo_violation_rate, 1.0),
                min(max(v.window.utilization, 0.0), 1.0),
                min(v.share_used_pct / view.unit_pct / total_units, 1.0),
                v.current.batch / prof.gpu.max_batch,  # type: ignore[union-attr]
            ]
        return np.asarray(out, dtype=np.float32)

    def targets(self, action: np.ndarray, view: ClusterView) -> dict[str, ServiceTarget]:
        """The targets an `action` (values in 0..1) asks for in `view`: each service's instances, share,
        batch and (inss) GPUs."""
        a = np.clip(np.asarray(action, dtype=np.float64), 0.0, 1.0)
        n = len(self.services)
        weights = a[:n] + 1e-3
        capacity = 100.0 * len(view.gpu_free_pct)
        total = capacity * (MIN_TOTAL + (1 - MIN_TOTAL) * a[n]) if self.kind == "ddpg" else capacity
        free = list(view.gpu_free_pct)
        out = {}
        for k, s in enumerate(self.services):
            g = self.profiles[s].gpu
            cur = view.services[s].current
            want = total * weights[k] / weights.sum()
            count = max(1, math.ceil(want / g.share_knee_pct - 1e-9))  # type: ignore[union-attr]
            share = min(100.0, max(SHARE_STEP_PCT, SHARE_STEP_PCT * round(want / count / SHARE_STEP_PCT)))
            if count == cur.replicas and abs(share - cur.share_pct) < DEADBAND_PCT:
                share = cur.share_pct
            batch = 1
            if self.kind == "inss":
                batch = 1 + round(float(a[n + k]) * (g.max_batch - 1))  # type: ignore[union-attr]
            gpus = self._place(cur, count, share, free) if self.kind == "inss" else None
            out[s] = ServiceTarget(count, share, batch, gpus)
        return out

    @staticmethod
    def _place(cur: ServiceTarget, count: int, share: float, free: list[float]) -> tuple[int, ...] | None:
        """InSS's placement stage, substituted: keep running replicas where they are; put each new
        one on the GPU with the most free share (least pressure from neighbours)."""
        keep = list(cur.gpus or ()) if abs(share - cur.share_pct) < 1e-9 else []
        keep = keep[:count]
        chosen = list(keep)
        for _ in range(count - len(keep)):
            g = int(np.argmax(free))
            if free[g] < share - 1e-9:
                break
            free[g] -= share
            chosen.append(g)
        return tuple(chosen) if len(chosen) == count else None


class SharePolicy:
    """A trained ddpg/inss actor as a target policy (deterministic)."""

    def __init__(self, model, mapper: ShareMapper, meta: ShareMeta | None = None):
        self.model = model
        self.mapper = mapper
        self.meta = meta
        self.name = mapper.kind

    @classmethod
    def load(
        cls, path: str | Path, profiles: Mapping[str, ServiceProfile], *, profile_source: str = ""
    ) -> SharePolicy:
        """The trained actor at `path` for these `profiles` (a ConfigError naming the file when it is not
        one, or was trained for other services); profile_source: the profile file errors name."""
        require_drl()
        from stable_baselines3 import DDPG, TD3

        meta = read_share_meta(path)
        missing = [s for s in meta.services if s not in profiles]
        if missing or list(profiles) != meta.services:
            raise ConfigError(
                [ConfigProblem(str(path), None, "services",
                               f"the model was trained for {', '.join(meta.services)}, "
                               f"asked for {', '.join(profiles)}")]
            )
        algo = DDPG if meta.algorithm == "DDPG" else TD3
        mapper = ShareMapper(meta.kind, profiles, profile_source=profile_source)
        return cls(algo.load(str(path), device="cpu"), mapper, meta)

    def plan(self, view: ClusterView) -> dict[str, ServiceTarget]:
        """The actor's targets for `view`."""
        action, _ = self.model.predict(self.mapper.observe(view), deterministic=True)
        return self.mapper.targets(action, view)


def read_share_meta(path: str | Path) -> ShareMeta:
    """The ShareMeta a model file at `path` carries, or a ConfigError naming the file."""
    try:
        with zipfile.ZipFile(path) as zf:
            return ShareMeta(**json.loads(zf.read(META_MEMBER)))
    except (OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError, TypeError) as exc:
        raise ConfigError(
            [ConfigProblem(str(path), None, META_MEMBER, f"not a testbed share-policy model: {exc}")]
        ) from None
