"""`testbed train --config FILE`: a run's options as a file beside its model, under the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.cli import main
from testbed.train.config_file import load_train_file
from testbed.train.options import opt

ROOT = Path(__file__).resolve().parents[2]


def _traces(tmp_path: Path, seconds: int = 60) -> Path:
    root = tmp_path / "traces"
    for sub, day in (("train", "day1.txt"), ("val", "day6.txt")):
        (root / sub).mkdir(parents=True)
        (root / sub / day).write_text("1 5\n" * seconds)
    return root


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_the_files_options_reach_training_and_the_command_line_wins(tmp_path, capsys):
    """The file's release_below without init_from is refused as the flag would be; given on the
    command line, --release-below 1.5 (and --init-from) replace the file's and are refused for
    their own reason: the command line's value is the one checked. Nothing is written."""
    cfg = tmp_path / "run.train.yaml"
    cfg.write_text("service: chatbot\nrelease_below: 0.13\n")
    out = tmp_path / "m.zip"
    traces = _traces(tmp_path)
    assert main(["train", "--config", str(cfg), "--traces", str(traces), "--out", str(out)]) != 0
    (line,) = _errors(capsys)
    assert "--release-below" in line and "--init-from" in line
    assert main(["train", "--config", str(cfg), "--traces", str(traces), "--out", str(out),
                 "--release-below", "1.5", "--init-from", str(ROOT / "models" / "chatbot.zip")]) != 0
    (line,) = _errors(capsys)
    assert "--release-below" in line and "(0, 1)" in line
    assert not out.exists()


@pytest.mark.parametrize(("text", "field", "line_no"), [
    ("service: chatbot\nhold_larges: true\n", "hold_larges", 2),
    ("service: chatbot\n\nsteps: many\n", "steps", 3),
    ("service: chatbot\nscales: 8\n", "scales", 2),
])
def test_a_bad_file_is_one_line_naming_file_line_and_field(tmp_path, capsys, text, field, line_no):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    assert main(["train", "--config", str(cfg), "--traces", str(_traces(tmp_path)),
                 "--out", str(tmp_path / "m.zip")]) != 0
    (line,) = _errors(capsys)
    assert f"{cfg}:{line_no}: {field}" in line
    assert not (tmp_path / "m.zip").exists()


@pytest.mark.parametrize("service", ["chatbot", "imgcls", "tts"])
def test_each_shipped_agent_keeps_the_run_that_made_it_beside_it(service):
    """models/SERVICE.train.yaml names its service and starts from a model that exists; its
    options are those the model's own record gives as its command."""
    import json

    opts = load_train_file(ROOT / "models" / f"{service}.train.yaml")
    assert opts["service"] == service and Path(opts["init_from"]).is_file()
    command = json.loads((ROOT / "models" / f"{service}.json").read_text())["command"]
    if "stop_at" in opts:  # TTS's run was stopped by hand: its record says where
        assert (f"--stop-at {opts['stop_at']}" in command
                or f"stopped by hand at about {opts['stop_at']:,}" in command), command
    for key, flag in (("steps", "--steps"), ("seed", "--seed"), ("scales", "--scales"),
                      ("loads", "--loads"), ("release_below", "--release-below")):
        if key in opts:
            shown = opt(key).show(opts[key]) if opt(key).show else (
                f"{opts[key]:g}" if isinstance(opts[key], float) else str(opts[key]))
            assert f"{flag} {shown}" in command, (key, command)
    for key, flag in (("shared", "--shared"), ("validate_pool", "--validate-pool"),
                      ("hold_largest", "--hold-largest")):
        assert opts.get(key, False) == (flag in command), (key, command)


def test_a_config_file_runs_a_training(tmp_path, capsys):
    """A tiny run from a file: its seed and steps are the model's."""
    pytest.importorskip("sb3_contrib", reason="Maskable PPO needs the drl extra")
    from testbed.train.model_file import read_meta

    cfg = tmp_path / "tiny.train.yaml"
    cfg.write_text("service: chatbot\nsteps: 256\nseed: 3\n")
    out = tmp_path / "m.zip"
    assert main(["train", "--config", str(cfg), "--traces", str(_traces(tmp_path, 900)),
                 "--out", str(out)]) == 0
    meta = read_meta(out)
    assert meta.seed == 3 and "--seed 3" in meta.command
