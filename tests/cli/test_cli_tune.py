"""`testbed tune` keeps its study in an Optuna storage: two worker processes share one study, the
trial budget is the study's, and the best trial is read back with every worker's trials."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

ROOT = Path(__file__).resolve().parents[2]


def _traces(tmp_path: Path) -> Path:
    root = tmp_path / "traces" / "val"
    root.mkdir(parents=True)
    (root / "day6.txt").write_text("1 5\n" * 120)  # two minutes of 5 requests a second
    return root.parent


def _worker(tmp_path: Path, storage: str, out: str, seed: int) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "testbed", "tune", "chatbot", "--trials", "8", "--traces",
            str(tmp_path / "traces"), "--storage", storage, "--study", "shared", "--seed",
            str(seed), "--out", out]
    return subprocess.Popen(argv, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_two_workers_share_one_study_and_the_best_trial_is_read_back(tmp_path: Path):
    _traces(tmp_path)
    storage = str(tmp_path / "study.log")  # a journal file: Optuna's multi-process storage
    workers = [_worker(tmp_path, storage, f"runs{i}", seed=i) for i in range(2)]
    outputs = [w.communicate(timeout=240)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    from testbed.train.tune import open_storage

    study = optuna.load_study(study_name="shared", storage=open_storage(storage))
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert 8 <= len(done) <= 9  # the study's budget, not 8 per worker (one may finish in flight)
    # both workers ran trials of the shared study
    assert all("(study shared)" in out for out in outputs)
    results = [json.loads(next((tmp_path / f"runs{i}").glob("*/tune.json")).read_text())
               for i in range(2)]
    best = max(t.value for t in done)
    # the worker that finished last read back the best of every worker's trials
    assert max(r["best_reward"] for r in results) == pytest.approx(best)
    assert all(r["study"] == "shared" and r["storage"] == storage for r in results)


def test_a_stopped_search_resumes_where_it_stopped(tmp_path: Path):
    from testbed.load.trace import load_trace
    from testbed.train.tune import tune

    trace = load_trace(_traces(tmp_path) / "val" / "day6.txt")
    storage = str(tmp_path / "study.log")
    first = tune("tts", trace, trials=2, storage=storage, study_name="s")
    again = tune("tts", trace, trials=3, storage=storage, study_name="s")
    assert (first.trials, again.trials) == (2, 3)  # one more trial, not three
    assert again.best_reward >= first.best_reward
