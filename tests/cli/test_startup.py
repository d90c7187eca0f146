"""The CLI's start-up floor: which heavy libraries `testbed --help`, `status` and `down` import.

Not timed (bench/startup.py prints the times): a fresh interpreter runs the console script's
`main`, then reports which of the heavy modules are in `sys.modules`. A heavy import added at the
top of a CLI module, or of a module the CLI imports at start, shows up here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# what no command may pay for unless it uses it
HEAVY = ("matplotlib", "torch", "stable_baselines3", "kubernetes", "pandas", "numpy")
# `--help` needs no models either: pydantic, yaml and jinja2 load with the commands that read files
HELP_HEAVY = (*HEAVY, "pydantic", "yaml", "jinja2")

PROBE = """
import contextlib, io, json, sys
preload, argv, watched = sys.argv[1], sys.argv[2:-1], sys.argv[-1].split(",")
if preload:
    __import__(preload)
from testbed.cli import main
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    rc = main(argv)
print(json.dumps({"rc": rc, "output": out.getvalue() + err.getvalue(),
                  "heavy": [m for m in watched if m in sys.modules]}))
"""


def startup_imports(argv: list[str], watched: tuple[str, ...], preload: str = "") -> dict:
    """Run the CLI's main with `argv` in a new interpreter (this checkout's code); its exit code,
    output and which `watched` modules it imported."""
    proc = subprocess.run([sys.executable, "-c", PROBE, preload, *argv, ",".join(watched)],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, COLUMNS="200"))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_help_imports_no_heavy_library():
    got = startup_imports(["--help"], HELP_HEAVY)
    assert got["rc"] == 0
    assert "status" in got["output"] and "sim" in got["output"]
    assert got["heavy"] == []


@pytest.mark.parametrize("command", ["status", "down"])
def test_status_and_down_with_nothing_up_import_no_heavy_library(command):
    # the autouse state_dir fixture gives an empty TESTBED_STATE_DIR: nothing is up
    got = startup_imports([command], HEAVY)
    if os.geteuid() == 0:
        expected = ("no testbed is up" if command == "status"
                    else "nothing to remove: no testbed is recorded as up")
    else:
        expected = "needs root"
    assert expected in got["output"]
    assert got["heavy"] == []


@pytest.mark.parametrize("command", ["status", "down"])
def test_status_and_down_with_nothing_up_build_no_testbed_model_and_load_no_other_command(command):
    """Issue 45: `status` and `down` list the state files without the specs' pydantic models or
    the data plane, and import their own CLI module alone."""
    watched = ("testbed.config.testbed_spec", "testbed.bringup.local", "testbed.cli.train",
               "testbed.cli.sim", "testbed.cli.scenario", "testbed.train.options")
    got = startup_imports([command], watched)
    assert got["heavy"] == []


def test_probe_sees_a_heavy_import():
    # the check above is not vacuous: a heavy module imported before main is reported
    got = startup_imports(["--help"], HELP_HEAVY, preload="numpy")
    assert got["heavy"] == ["numpy"]


def test_help_of_a_subcommand_still_shows_the_papers_defaults():
    # the defaults come from testbed.profiles.paper, which the CLI imports without the models
    # (typer itself brings pydantic in for an option with bounds, so only HEAVY is watched here)
    got = startup_imports(["sim", "eval", "--help"], HEAVY)
    assert got["rc"] == 0
    assert "default: 8" in got["output"]
    assert got["heavy"] == []
    got = startup_imports(["services", "up", "--help"], HEAVY)
    assert "chatbot,imgcls,tts" in got["output"]
    assert got["heavy"] == []
