"""A user's own research option and callback in a file of theirs: docs/sim.md's example ("Research
options in Python") runs as written, on short traces and a short budget, and its wrapper composes
with the package's."""

from dataclasses import replace
from pathlib import Path

import pytest

gym = pytest.importorskip("gymnasium", reason="the Gymnasium env needs the drl extra")
pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")

from testbed.load.trace import Trace  # noqa: E402
from testbed.train.env import ScalingEnv  # noqa: E402
from testbed.train.episode import draw_episode  # noqa: E402
from testbed.train.wrappers import PoolReward, RandomFreeUnits, SharedPool  # noqa: E402

SIM_DOC = Path(__file__).resolve().parents[2] / "docs" / "sim.md"


def _docs_example() -> str:
    section = SIM_DOC.read_text().split("**Research options in Python.**", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def _run_docs_example(tmp_path, monkeypatch) -> dict:
    """The example, its traces constant 900 s days (29 periods an episode) and its run 128 steps
    validated every 64, writing under `tmp_path`; its names afterwards."""
    import testbed.load.trace
    import testbed.train.ppo

    real_train = testbed.train.ppo.train
    runs = []

    def short_train(service, train_tr, val_tr, out, **kw):
        kw.update(steps=128, val_episodes=1, validate_every=64,
                  ppo_params={"n_steps": 64, "batch_size": 64})
        runs.append(real_train(service, train_tr, val_tr, tmp_path / out, **kw))
        return runs[-1]

    monkeypatch.setattr(testbed.load.trace, "load_trace", lambda path: Trace.constant(5, 900))
    monkeypatch.setattr(testbed.train.ppo, "train", short_train)
    names: dict = {"__name__": "users_file"}
    exec(compile(_docs_example(), "users_file.py", "exec"), names)
    names["runs"] = runs
    return names


def test_the_docs_example_trains_with_its_own_wrapper_and_callback(tmp_path, monkeypatch):
    names = _run_docs_example(tmp_path, monkeypatch)
    (meta,) = names["runs"]
    assert [n for n, _ in meta.validations] == [64, 128]
    assert (tmp_path / "busy" / "chatbot.zip").is_file()
    assert names["lengths"].lengths == [29] * (128 // 29)  # its callback saw every episode


def test_the_docs_wrapper_composes_with_the_packages():
    definitions = _docs_example().split("\ndays = ", 1)[0]  # the classes, not the run
    names: dict = {"__name__": "users_file"}
    exec(compile(definitions, "users_file.py", "exec"), names)
    busy_days = names["BusyDays"]
    day = Trace.constant(20, 1800)
    env = RandomFreeUnits(PoolReward(SharedPool(busy_days(ScalingEnv("chatbot", [day], 0.15), 1, 3))))
    loads = set()
    for seed in range(5):
        env.reset(seed=seed)
        loads.add(env.unwrapped.load)
        assert set(env.unwrapped._cluster.services()) == {"chatbot", "imgcls", "tts"}
    assert len(loads) == 5 and all(1 <= m <= 3 for m in loads)
    _, r, *_ = env.step(2)
    assert r <= 0
    # options passed to reset win over the wrappers'
    env.reset(seed=0, options={"draw": lambda rng, e: replace(draw_episode(rng, e.traces, 8), load=4.0)})
    assert env.unwrapped.load == 4.0
