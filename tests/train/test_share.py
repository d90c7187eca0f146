"""The share allocators (ddpg, inss): the env, the shipped models as target policies, a tiny
training run that writes a model and its manifest entry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3", reason="the drl extra is not installed")

from testbed.cluster.base import ServiceTarget
from testbed.load.trace import Trace
from testbed.profiles import default_profiles, paper
from testbed.scaler.share import ShareMapper, SharePolicy, read_share_meta
from testbed.sim.gpu import GpuSimCluster
from testbed.train.share import ShareEnv, train_share

MODELS = Path(__file__).resolve().parents[2] / "models"
PROFILES = default_profiles()


def _day(rate: float = 40.0, seconds: int = 1800) -> Trace:
    return Trace.constant(rate, seconds, name="flat")


def test_the_env_maps_actions_to_targets_that_fit():
    env = ShareEnv(ShareMapper("inss", PROFILES), [_day()], paper.TABLE_5_1.ratios, episode_steps=10)
    obs, _ = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    for _ in range(10):
        obs, r, term, trunc, _ = env.step(env.action_space.sample())
        assert r <= 0 and env.observation_space.contains(obs)
        assert all(free >= 0 for free in env._cluster.gpu_free_pct())
    assert trunc and not term


@pytest.mark.parametrize("kind", ["ddpg", "inss"])
def test_a_shipped_model_plans_valid_targets(kind):
    path = MODELS / f"{kind}.zip"
    if not path.exists():
        pytest.skip(f"{path} not shipped")
    meta = read_share_meta(path)
    assert meta.kind == kind and meta.services == list(PROFILES) and meta.best_validation_reward < 0
    pol = SharePolicy.load(path, PROFILES)
    cluster = GpuSimCluster(PROFILES, dict.fromkeys(PROFILES, _day()), paper.TABLE_5_1.ratios, gpus=2)
    from testbed.scaler.target import cluster_view

    windows = cluster.advance()
    plan = pol.plan(cluster_view(cluster, windows))
    assert set(plan) == set(PROFILES)
    for s, t in plan.items():
        assert isinstance(t, ServiceTarget) and 0 < t.share_pct <= 100 and t.batch >= 1
        assert kind == "inss" or t.batch == 1
        cluster.configure(s, t)
    manifest = json.loads((MODELS / "manifest.json").read_text())
    for key in ("command", "seed", "commit", "steps", "best_validation_reward"):
        assert key in manifest[f"{kind}.zip"]


def test_a_tiny_training_run_writes_the_model_and_its_manifest_entry(tmp_path):
    out = tmp_path / "models" / "ddpg.zip"
    scratch = tmp_path.parent / "elsewhere" / "ddpg.zip"  # outside the repository and beside it
    meta = train_share("ddpg", PROFILES, [_day()], [_day(seconds=600)], paper.TABLE_5_1.ratios, out,
                       steps=600, validate_every=10_000, command=f"testbed train --out {scratch}")
    assert out.exists() and meta.steps == 600 and np.isfinite(meta.best_validation_reward)
    # the manifest's command names the option, not this machine's folder
    recorded = json.loads((out.parent / "manifest.json").read_text())["ddpg.zip"]["command"]
    assert recorded == read_share_meta(out).command == "testbed train --out OUT"
    assert read_share_meta(out).algorithm == "DDPG"
