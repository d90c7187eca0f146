"""Following a training run: the progress status, the learning curve beside the model, --resume."""

from __future__ import annotations

import json

import pytest

from testbed.errors import ConfigError
from testbed.load.trace import Trace

KW = {"val_episodes": 1, "validate_every": 64, "ppo_params": {"n_steps": 64, "batch_size": 64}}


def test_curve_and_progress_carry_episode_and_validation_rewards(tmp_path):
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    from testbed.train.ppo import curve_paths, train

    tr = [Trace.constant(5, 900)]  # 29 periods of 30 s an episode (reset reads the first)
    seen = []
    out = tmp_path / "m.zip"
    meta = train("chatbot", tr, tr, out, steps=256, progress=seen.append, **KW)
    curve_json, curve_png = curve_paths(out)
    assert (curve_json.name, curve_png.name) == ("m.curve.json", "m.curve.png")
    assert curve_png.stat().st_size > 1000
    doc = json.loads(curve_json.read_text())
    assert [(v["step"], v["reward"]) for v in doc["validation"]] == [tuple(v) for v in meta.validations]
    assert [v["step"] for v in doc["validation"]] == [64, 128, 192, 256]
    assert doc["validation_periods"] == 29
    assert doc["validation"][0]["per_period"] == pytest.approx(meta.validations[0][1] / 29)
    assert len(doc["training"]) == 256 // 29 and all(e["periods"] == 29 for e in doc["training"])
    (last,) = seen  # at step 256, before its own validation
    assert last.steps == 256 and last.episode_periods == 29
    assert last.episode_reward == pytest.approx(sum(e["reward"] for e in doc["training"]) / 8)
    assert last.last_validation == meta.validations[2][1]
    assert last.best_validation == max(v for _, v in meta.validations[:3])
    assert "/period" in last.line() and "validation" in last.line()


def test_resume_goes_on_from_the_newest_checkpoint(tmp_path):
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    from testbed.train.model_file import read_meta
    from testbed.train.ppo import train

    tr = [Trace.constant(5, 900)]
    ck = tmp_path / "ck"
    out = tmp_path / "m.zip"
    first = train("chatbot", tr, tr, out, steps=256, stop_at=128, checkpoints=ck, **KW)
    assert [n for n, _ in first.validations] == [64, 128]
    meta = train("chatbot", tr, tr, out, steps=256, checkpoints=ck, resume=True, **KW)
    assert [n for n, _ in meta.validations] == [64, 128, 192, 256]
    assert meta.validations[:2] == [tuple(v) for v in first.validations]
    assert read_meta(ck / "chatbot-256.zip").steps == 256
    assert meta.best_validation_reward == pytest.approx(max(v for _, v in meta.validations))
    assert read_meta(out).validations == [list(v) for v in meta.validations]
    curve = json.loads(out.with_suffix(".curve.json").read_text())
    # the episode cut at step 128 is lost; the resumed run starts a new one there
    assert [e["step"] for e in curve["training"]] == [29, 58, 87, 116, 157, 186, 215, 244]
    with pytest.raises(ConfigError, match="at step 256: nothing left of --steps 256"):
        train("chatbot", tr, tr, out, steps=256, checkpoints=ck, resume=True, **KW)
    with pytest.raises(ConfigError, match="fitted copy"):
        train("chatbot", tr, tr, out, steps=512, checkpoints=ck, resume=True, hold_largest=True,
              init_from=out, scales=[8, 16], **KW)


def test_resume_without_a_checkpoint_is_one_clear_error(tmp_path):
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    from testbed.train.ppo import train

    tr = [Trace.constant(5, 900)]
    with pytest.raises(ConfigError, match=r"no checkpoint chatbot-STEPS\.zip"):
        train("chatbot", tr, tr, tmp_path / "m.zip", steps=128, checkpoints=tmp_path / "ck",
              resume=True, **KW)
    with pytest.raises(ConfigError, match="--checkpoints"):
        train("chatbot", tr, tr, tmp_path / "m.zip", steps=128, resume=True, **KW)
    assert not (tmp_path / "m.zip").exists()
