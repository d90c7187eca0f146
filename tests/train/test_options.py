"""One list of training options (issue 45): `testbed train`'s command-line options, the --config
file's fields, TrainConfig's research options and a model's manifest all come from
testbed.train.options; the shipped models' manifests still load and their recorded commands still
parse into the same options."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import fields
from pathlib import Path

import pytest
import typer
from typer.main import get_command

from testbed.cli import _register, app
from testbed.cli.train import _options
from testbed.train.config import TrainConfig
from testbed.train.config_file import TrainFile
from testbed.train.model_file import ModelMeta, read_meta
from testbed.train.options import PpoOptions, TrainOptions, command_line

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = {f.name for f in fields(TrainOptions)}
PPO = {f.name for f in fields(PpoOptions)}


def _train_command() -> typer.core.TyperCommand:
    _register()
    return get_command(app).commands["train"]


def test_the_command_line_the_file_the_config_and_the_manifest_share_one_list():
    cli = {p.name for p in _train_command().params} - {"config_file", "help"}
    assert cli == OPTIONS and len(OPTIONS) == 28  # and --config
    assert set(TrainFile.model_fields) == OPTIONS | {"notes"}
    assert {f.name for f in fields(TrainConfig)} >= PPO
    assert {f.name for f in fields(ModelMeta)} >= PPO  # the manifest: the config plus results


def test_no_option_is_listed_by_hand_where_it_is_used():
    """`locals()` hand-offs and per-option keyword lists are gone from the command."""
    text = (ROOT / "testbed" / "cli" / "train.py").read_text()
    assert "locals()" not in text
    for name in PPO - {"tensorboard", "checkpoints", "resume"}:
        assert not re.search(rf"\b{name}=", text), name


@pytest.mark.parametrize("service", ["chatbot", "imgcls", "tts"])
def test_the_shipped_models_manifests_load_and_their_commands_parse(service):
    meta = read_meta(ROOT / "models" / f"{service}.zip")
    assert meta.service == service and meta.validations and meta.scales == [8, 128]
    recorded = meta.command.split(" (")[0]  # a note in brackets may follow the command
    args = shlex.split(recorded)[2:]
    cmd = _train_command()
    ctx = cmd.make_context("train", args)
    options = _options(ctx, {k: v for k, v in ctx.params.items() if k != "config_file"}, None)
    assert options.service == service and options.scales == meta.scales
    assert options.seed == meta.seed and options.shared == meta.shared
    config = TrainConfig(service=service, steps=options.steps, seed=options.seed, **options.ppo())
    # written back, the options give the command the model records
    assert command_line({f.name: getattr(config, f.name) for f in fields(config)}) == recorded


def test_an_old_manifest_names_each_partner_file_and_loads_as_their_folder(tmp_path):
    import zipfile

    old = json.loads((ROOT / "models" / "imgcls.json").read_text())
    old["partners"] = {"chatbot": "models/chatbot.zip", "tts": "models/tts.zip"}
    path = tmp_path / "old.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("testbed.json", json.dumps(old))
    assert read_meta(path).partners == "models"
