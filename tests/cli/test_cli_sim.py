"""`testbed sim eval` as a user runs it: JSON keys, the oracle gap, a bad option."""

from __future__ import annotations

import json

import pytest

from testbed.cli import main
from tests.cli.fourth_service import ASR


def test_sim_eval_json_reports_the_oracle_and_the_gap(tmp_path, capsys):
    trace = tmp_path / "flat.txt"
    trace.write_text("1 10\n" * 600)  # 10 x 0.15 -> 1 request/s: one instance is always enough
    rc = main(["sim", "eval", "--service", "chatbot", "--trace", str(trace), "--json"])
    assert rc == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    for key in ("slo_violation_rate", "instances", "proc_time", "reward", "steps_per_second"):
        assert key in row
    assert row["steps"] == 20 and row["instances"] == 1.0
    # rule v2 never leaves one instance here, which is also the best schedule
    assert row["oracle_reward"] == pytest.approx(-0.1 / 8)
    assert row["reward"] == pytest.approx(-0.1 / 8)
    assert row["gap"] == pytest.approx(0.0, abs=1e-12)


def test_sim_eval_rejects_an_unknown_rate_limit(tmp_path, capsys):
    trace = tmp_path / "flat.txt"
    trace.write_text("1 10\n" * 60)
    rc = main(["sim", "eval", "--trace", str(trace), "--rate-limit", "bogus"])
    assert rc != 0
    assert "--rate-limit" in capsys.readouterr().err


def test_sim_eval_measures_the_way_it_is_told_and_says_so(tmp_path, capsys):
    trace = tmp_path / "steps.txt"  # imgcls from 2 to 14 requests a second and back: it scales
    trace.write_text("".join(f"1 {5 + 30 * ((k // 300) % 2)}\n" for k in range(3600)))
    rows = {}
    for measure in ("harness", "drafas"):
        assert main(["sim", "eval", "--service", "imgcls", "--trace", str(trace), "--no-oracle",
                     "--json", "--measure", measure]) == 0
        (rows[measure],) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows["harness"]["measure"] == "harness" and rows["drafas"]["measure"] == "drafas"
    assert rows["harness"]["reward"] != rows["drafas"]["reward"]
    assert main(["sim", "eval", "--trace", str(trace), "--measure", "prometheus"]) == 2
    assert "--measure: measure: unknown way of measuring 'prometheus'; known: harness, drafas" in (
        capsys.readouterr().err)


def test_sim_eval_rejects_the_old_author_switch_by_name(tmp_path, capsys):
    trace = tmp_path / "flat.txt"
    trace.write_text("1 10\n" * 60)
    assert main(["sim", "eval", "--trace", str(trace), "--rate-limit", "author"]) != 0
    assert "use profile or none" in capsys.readouterr().err


# -- sim tables / sim eval with bad input: one line naming what is missing, exit != 0 -----------


def _traces(tmp_path, seconds=120):
    test = tmp_path / "traces" / "test"
    test.mkdir(parents=True)
    for shift in (0, 8, 16):
        (test / f"day7-shift{shift}h.txt").write_text("1 20\n" * seconds)
    return tmp_path / "traces"


@pytest.fixture(autouse=True)
def _wide_console():
    from testbed import cli

    width = cli.err_console.width
    cli.err_console.width = 10_000  # one error, one line, however long
    yield
    cli.err_console.width = width


def _error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_sim_tables_unknown_table(tmp_path, capsys):
    rc = main(["sim", "tables", "--traces", str(_traces(tmp_path)), "--table", "5.9", "--no-drl"])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "--table" in line and "'5.9'" in line and "5.1, 5.2, 5.3" in line


def test_sim_tables_missing_traces(tmp_path, capsys):
    rc = main(["sim", "tables", "--traces", str(tmp_path / "nowhere"), "--no-drl"])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "nowhere/test/day7-shift0h.txt" in line and "--traces" in line and "shipped" in line


def test_sim_tables_missing_models(tmp_path, capsys):
    empty = tmp_path / "models"
    empty.mkdir()
    rc = main(["sim", "tables", "--traces", str(_traces(tmp_path)), "--models", str(empty)])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "models/chatbot.zip" in line and "no such model file" in line and "testbed train" in line
    rc = main(["sim", "tables", "--traces", str(_traces(tmp_path / "b")), "--models", str(tmp_path / "x")])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "no such model directory" in line


def test_sim_eval_ppo_with_a_missing_model_file(tmp_path, capsys):
    rc = main(["sim", "eval", "--policy", "ppo", "--service", "tts", "--traces", str(_traces(tmp_path)),
               "--model", str(tmp_path / "tts.zip"), "--no-oracle"])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "tts.zip" in line and "testbed train tts" in line


def _tiny_model(path, service, obs_size=30, observation="current"):
    """A real (untrained) Maskable PPO file with the given manifest and observation size."""
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    import gymnasium as gym
    import numpy as np
    from sb3_contrib import MaskablePPO

    from testbed.scaler.state import OBSERVATION
    from testbed.train import ppo as train_ppo
    from testbed.train.model_file import ModelMeta

    class Env(gym.Env):
        observation_space = gym.spaces.Box(0.0, 1.0, shape=(obs_size,), dtype=np.float32)
        action_space = gym.spaces.Discrete(5)

        def reset(self, *, seed=None, options=None):
            return np.zeros(obs_size, dtype=np.float32), {}

        def step(self, action):
            return np.zeros(obs_size, dtype=np.float32), 0.0, False, False, {}

        def action_masks(self):
            return np.ones(5, dtype=bool)

    model = MaskablePPO("MlpPolicy", Env(), n_steps=16, batch_size=16, device="cpu")
    meta = ModelMeta(service=service, profile={}, ratio=0.15, total_units=8, seed=0,
                     train_traces=[], val_traces=[], steps=0, commit="test",
                     observation=OBSERVATION if observation == "current" else observation)
    train_ppo._save(model, path, meta)
    return path


def _models_with(tmp_path, **override):
    d = tmp_path / "models"
    d.mkdir(exist_ok=True)
    for s in ("chatbot", "imgcls", "tts"):
        kw = override.get(s, {})
        _tiny_model(d / f"{s}.zip", kw.get("service", s), kw.get("obs_size", 30),
                    kw.get("observation", "current"))
    return d


def test_sim_tables_model_of_another_service(tmp_path, capsys):
    models = _models_with(tmp_path, imgcls={"service": "tts"})
    rc = main(["sim", "tables", "--traces", str(_traces(tmp_path)), "--models", str(models)])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "imgcls.zip" in line and "an agent for 'tts', not 'imgcls'" in line


def test_sim_tables_model_of_another_observation_size(tmp_path, capsys):
    models = _models_with(tmp_path, tts={"obs_size": 20})
    rc = main(["sim", "tables", "--traces", str(_traces(tmp_path)), "--models", str(models)])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "tts.zip" in line and "observation size (20,)" in line and "30" in line


def test_sim_eval_model_of_an_older_observation(tmp_path, capsys):
    models = _models_with(tmp_path, chatbot={"observation": None})
    rc = main(["sim", "eval", "--policy", "ppo", "--service", "chatbot", "--traces",
               str(_traces(tmp_path)), "--model", str(models), "--no-oracle"])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "chatbot.zip" in line and "older version" in line and "testbed train chatbot" in line


def test_sim_tables_json_with_the_shipped_agents(tmp_path, capsys):
    from testbed.paths import MODELS_DIR

    if not all((MODELS_DIR / f"{s}.zip").is_file() for s in ("chatbot", "imgcls", "tts")):
        pytest.skip("no shipped agents in models/")
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    rc = main(["sim", "tables", "--traces", str(_traces(tmp_path)), "--table", "5.1", "--json"])
    assert rc == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {(r["policy"], r["service"]) for r in rows} == {
        (p, s) for p in ("drl", "rule_v2") for s in ("chatbot", "imgcls", "tts")
    }
    for r in rows:
        assert r["table"] == "5.1" and r["steps"] == 4
        assert set(r["paper"]) >= {"reward", "instances", "slo_violation_rate"}
        assert "reward_diff" in r


@pytest.mark.parametrize("bad", ["8,1", "0,4", "x"])
def test_train_rejects_a_bad_load_range_before_reading_traces(tmp_path, capsys, bad):
    rc = main(["train", "--policy", "inss", "--traces", str(tmp_path / "none"), "--load-scales", bad])
    assert rc != 0
    err = capsys.readouterr().err
    assert "--load-scales" in err and "no training traces" not in err


def _tiny_traces(tmp_path, seconds=60):
    """A traces folder with a training day and the validation day of `seconds` each."""
    root = tmp_path / "traces"
    for sub, day in (("train", "day1.txt"), ("val", "day6.txt")):
        (root / sub).mkdir(parents=True)
        (root / sub / day).write_text("1 5\n" * seconds)
    return root


def test_train_bad_loads_is_one_line(tmp_path, capsys):
    """--loads takes positive multipliers; anything else is refused before training starts."""
    traces = _tiny_traces(tmp_path)
    out = tmp_path / "m.zip"
    rc = main(["train", "chatbot", "--traces", str(traces), "--loads", "1,0",
               "--out", str(out)])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "--loads" in line and "'1,0'" in line
    assert not out.exists()


@pytest.mark.parametrize("flag", [["--validate-pool"], ["--partners", "models"], ["--pool-reward"]])
def test_train_shared_only_flags_without_shared_are_one_line(tmp_path, capsys, flag):
    """The pool's validation and partner agents exist only in shared episodes: refused without
    --shared, before anything is trained or written."""
    traces = _tiny_traces(tmp_path)
    out = tmp_path / "m.zip"
    rc = main(["train", "chatbot", "--traces", str(traces), *flag, "--out", str(out)])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert flag[0] in line and "--shared" in line
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--release-below", "0.13"], "--init-from"),
        (["--release-below", "1.5", "--init-from", "models/chatbot.zip"], "(0, 1)"),
        (["--ent-coef", "-0.1"], ">= 0"),
        (["--hold-largest", "--scales", "8,128"], "--init-from"),
        (["--hold-largest", "--scales", "8", "--init-from", "models/chatbot.zip"], "two sizes"),
    ],
)
def test_train_bad_release_or_entropy_is_one_line(tmp_path, capsys, flags, words):
    """--release-below teaches a trained agent a threshold on a metric in (0, 1); --ent-coef is a
    non-negative weight; --hold-largest keeps a starting agent's behaviour at the largest of two
    sizes or more: anything else is refused before training starts."""
    traces = _tiny_traces(tmp_path)
    out = tmp_path / "m.zip"
    rc = main(["train", "chatbot", "--traces", str(traces), *flags, "--out", str(out)])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert flags[0] in line and words in line
    assert not out.exists()


def test_sim_tables_prints_the_reproduce_verdict_per_cell_and_table(tmp_path, capsys):
    """The same judge as `testbed reproduce`: the paper's test day passes Table 5.1; a flat toy
    trace is nothing like it, its cells FAIL with the reason and the command exits 1."""
    # the default --traces: the paper's, shipped with testbed
    assert main(["sim", "tables", "--table", "5.1", "--no-drl"]) == 0
    out = capsys.readouterr().out
    assert out.count("PASS") == 3 + 1 and "Table 5.1: PASS" in out  # 3 cells, the table
    assert "gap to oracle" not in out  # no empty column without --oracle
    assert main(["sim", "tables", "--traces", str(_traces(tmp_path)), "--table", "5.1",
                 "--no-drl"]) == 1
    out = capsys.readouterr().out
    assert "Table 5.1: FAIL" in out and "reward" in out and "from the paper (tolerance" in out


def _episode_traces(tmp_path):
    """Training and validation days of 15 minutes: 29 periods an episode."""
    return _tiny_traces(tmp_path, seconds=900)


def test_train_writes_the_learning_curve_beside_the_model(tmp_path, capsys):
    """A tiny training run (one rollout of 2048 steps): the curve's JSON holds the validation the
    model's meta records and the training episodes, the PNG exists, and the last line gives the
    best validation on both scales."""
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    from testbed.train.model_file import read_meta

    traces = _episode_traces(tmp_path)
    out = tmp_path / "m.zip"
    rc = main(["train", "chatbot", "--traces", str(traces), "--steps", "256", "--scales", "none",
               "--out", str(out)])
    assert rc == 0
    meta = read_meta(out)
    curve = json.loads((tmp_path / "m.curve.json").read_text())
    assert [(v["step"], v["reward"]) for v in curve["validation"]] == [tuple(v) for v in meta.validations]
    assert curve["validation_periods"] == 29 and len(curve["training"]) == 2048 // 29
    assert (tmp_path / "m.curve.png").stat().st_size > 1000
    said = capsys.readouterr().out
    per_period = meta.best_validation_reward / 29
    assert f"{per_period:.4f} per period over 29" in said and "m.curve.png" in said


def test_train_resume_without_checkpoints_is_one_line(tmp_path, capsys):
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    traces = _episode_traces(tmp_path)
    out = tmp_path / "m.zip"
    rc = main(["train", "chatbot", "--traces", str(traces), "--resume", "--checkpoints",
               str(tmp_path / "ck"), "--out", str(out)])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "no checkpoint chatbot-STEPS.zip" in line and str(tmp_path / "ck") in line
    assert not out.exists()


# -- any trace, any service: a user's trace file and a fourth service from a profile file ---------



def _asr(tmp_path) -> tuple[str, str]:
    """A profile file with a fourth service, asr, and a 10-minute trace of 2-4 requests a second."""
    prof = tmp_path / "asr.yaml"
    prof.write_text(ASR)
    trace = tmp_path / "asr-day.txt"
    trace.write_text("".join(f"1 {2 + (i // 60) % 3}\n" for i in range(600)))
    return str(prof), str(trace)


def test_sim_eval_runs_a_service_of_ones_own_on_ones_own_trace_and_names_it(tmp_path, capsys):
    prof, trace = _asr(tmp_path)
    rc = main(["sim", "eval", "--trace", trace, "--service", "asr", "--profiles", prof, "--json"])
    assert rc == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["service"] == "asr" and row["trace"] == "asr-day.txt" and row["steps"] == 20
    # 2-4 req/s at ratio 1 on replicas serving 5 req/s: rule v2 adds one, nothing is late
    assert row["instances"] > 1.0 and row["slo_violation_rate"] == 0.0
    assert row["reward"] <= row["oracle_reward"] + 1e-12
    rc = main(["sim", "eval", "--trace", f"asr={trace}", "--service", "asr", "--profiles", prof,
               "--no-oracle"])
    assert rc == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "on asr-day.txt" in out and "Table" not in out


def test_sim_eval_an_unknown_service_lists_the_known_ones(tmp_path, capsys):
    _, trace = _asr(tmp_path)
    rc = main(["sim", "eval", "--trace", trace, "--service", "asr"])  # without its profile file
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "unknown asr; known: chatbot, imgcls, tts" in line and "--profiles" in line


def test_sim_eval_all_is_the_papers_three_even_with_a_fourth_service(tmp_path, capsys):
    prof, trace = _asr(tmp_path)
    rc = main(["sim", "eval", "--trace", trace, "--profiles", prof, "--json", "--no-oracle"])
    assert rc == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["service"] for r in rows] == ["chatbot", "imgcls", "tts"]
    assert "asr from" in captured.err and "--service chatbot,imgcls,tts,asr adds it" in captured.err


def test_sim_eval_a_service_off_the_test_day_needs_a_trace(tmp_path, capsys):
    prof, _ = _asr(tmp_path)
    rc = main(["sim", "eval", "--traces", str(_traces(tmp_path)), "--service", "asr",
               "--profiles", prof])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "no trace for asr" in line and "--trace asr=FILE" in line


def test_sim_tables_with_a_fourth_service_and_a_trace_names_it_and_judges_nothing(tmp_path, capsys):
    prof, trace = _asr(tmp_path)
    rc = main(["sim", "tables", "--no-drl", "--trace", trace, "--service", "all,asr",
               "--profiles", prof, "--table", "5.1", "--json"])
    assert rc == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["service"] for r in rows] == ["chatbot", "imgcls", "tts", "asr"]
    for r in rows:
        assert r["trace"] == "asr-day.txt" and r["table_setup"] == "5.1" and "paper" not in r
    rc = main(["sim", "tables", "--no-drl", "--trace", trace, "--service", "asr",
               "--profiles", prof, "--table", "5.3"])
    assert rc == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "asr-day.txt (Table 5.3's units and ratios): 128 units" in out
    assert "no comparison with Table 5.3" in out and "PASS" not in out and "FAIL" not in out


def test_sim_tables_on_the_test_day_with_a_fourth_service_registered(tmp_path, capsys):
    prof, _ = _asr(tmp_path)
    rc = main(["sim", "tables", "--no-drl", "--traces", str(_traces(tmp_path)), "--profiles", prof,
               "--table", "5.1", "--json"])
    assert rc == 0  # the paper's three, beside the paper; asr is named as not run
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["service"] for r in rows] == ["chatbot", "imgcls", "tts"]
    assert all("paper" in r for r in rows) and "asr from" in captured.err


def test_train_a_service_of_ones_own_on_trace_files_of_ones_own(tmp_path, capsys):
    """Maskable PPO for asr (a profile file's) on the user's files: the model's meta records asr's
    profile, ratio 1 and the files; the rerunnable command names them."""
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    from testbed.train.model_file import read_meta

    prof, trace = _asr(tmp_path)
    out = tmp_path / "asr.zip"
    rc = main(["train", "asr", "--profiles", prof, "--trace", trace, "--val-trace", trace,
               "--steps", "64", "--scales", "none", "--out", str(out)])
    assert rc == 0
    meta = read_meta(out)
    assert meta.service == "asr" and meta.ratio == 1.0 and meta.profile["slo_ms"] == 800
    assert meta.train_traces == ["asr-day.txt"] and meta.val_traces == ["asr-day.txt"]
    assert "--trace asr-day.txt --val-trace asr-day.txt" in meta.command
    assert "on asr-day.txt" in capsys.readouterr().out


def test_train_with_own_traces_needs_a_validation_trace(tmp_path, capsys):
    prof, trace = _asr(tmp_path)
    rc = main(["train", "asr", "--profiles", prof, "--trace", trace,
               "--traces", str(tmp_path / "none"), "--steps", "64"])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "none/val/day6.txt" in line and "--val-trace FILE" in line


def test_train_shared_episodes_refuse_a_service_off_the_papers_three(tmp_path, capsys):
    prof, trace = _asr(tmp_path)
    rc = main(["train", "asr", "--profiles", prof, "--trace", trace, "--val-trace", trace,
               "--shared", "--steps", "64"])
    assert rc != 0
    (line,) = _error_lines(capsys)
    assert "--shared" in line and "asr is not one of them" in line


def test_tune_a_service_of_ones_own_on_a_trace_of_ones_own(tmp_path, capsys):
    pytest.importorskip("optuna")
    prof, trace = _asr(tmp_path)
    rc = main(["tune", "asr", "--profiles", prof, "--trace", trace, "--trials", "2",
               "--out", str(tmp_path / "runs")])
    assert rc == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "asr rule_v2: 2 trials on asr-day.txt" in out and "profile's rule:" in out
    (result,) = (tmp_path / "runs").glob("*/tune.json")
    assert json.loads(result.read_text())["paper_params"]["slo_high"] == 0.089  # the defaults


def test_ddpg_trains_the_papers_three_with_a_fourth_service_registered(tmp_path, capsys):
    """A registered asr (no gpu: curve) is not one of the allocator's services: ddpg trains the
    paper's three, as before the service was added."""
    pytest.importorskip("stable_baselines3", reason="ddpg needs the drl extra")
    from testbed.profiles import ServiceProfile, register_service, unregister_service

    for part in ("train/day1.txt", "val/day6.txt"):
        (tmp_path / "traces" / part).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "traces" / part).write_text("1 30\n" * 3600)
    register_service(ServiceProfile(name="asr", capacity=1, queue_limit=11, proc_time_ms=(150, 250),
                                    startup_ms=5000, slo_ms=800))
    try:
        rc = main(["train", "--policy", "ddpg", "--traces", str(tmp_path / "traces"), "--steps", "20",
                   "--out", str(tmp_path / "m" / "ddpg.zip")])
    finally:
        unregister_service("asr")
    assert rc == 0, capsys.readouterr().err
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert "asr" not in json.dumps(manifest) and "tts" in json.dumps(manifest)
