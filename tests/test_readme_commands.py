"""The README cannot drift from the CLI: every `testbed …` command in its bash blocks parses
(command, options and their values) as written, and the ones that need no lab, root or minutes
run for real."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer._click.exceptions import UsageError  # typer carries its own click

from testbed.cli import _register, app, optional_values

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def readme_commands(text: str) -> list[str]:
    """Each `testbed …` invocation of the README's bash blocks, one per command: comments and
    continuation lines joined, `&&`/`|`/`;` split, optional `[...]` groups taken with their
    first alternative."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip().rstrip("&").strip()
            for part in re.split(r"\s(?:&&|;)\s", line):
                m = re.search(r"(?:^|\s)(testbed\s.*)$", part)
                if not m:
                    continue
                cmd = re.sub(r"\[([^\[\]]*)\]",
                             lambda g: g.group(1).split(" | ")[0], m.group(1))
                out.append(cmd.strip())
    return out


def _parse(argv: list[str]) -> str:
    """What click does with the arguments, without running the command (after `main`'s
    `optional_values`, as the console script does: `--web` alone); the command's path."""
    _register()
    group = typer.main.get_command(app)
    ctx = group.make_context("testbed", optional_values(list(argv)))
    path = ["testbed"]
    while hasattr(ctx.command, "resolve_command"):  # a group: on to its subcommand
        args = [*getattr(ctx, "_protected_args", []), *ctx.args]
        name, cmd, rest = ctx.command.resolve_command(ctx, args)
        path.append(name)
        ctx = cmd.make_context(name, rest, parent=ctx)
    return " ".join(path)


COMMANDS = readme_commands(README.read_text())


def test_the_readme_has_commands_to_check():
    assert len(COMMANDS) >= 30
    assert "testbed run scenarios/slicing-ci.yaml" in COMMANDS  # the main job


@pytest.mark.parametrize("command", COMMANDS)
def test_every_readme_command_parses(command: str):
    argv = shlex.split(command)[1:]
    assert _parse(argv).split()[1] == argv[0]  # down to a command, not stopped at the group


def test_a_drifted_command_does_not_parse():
    assert _parse(["sim", "tables", "--json"]) == "testbed sim tables"
    with pytest.raises(UsageError, match="No such option: --no-such-flag"):
        _parse(["load", "imgcls", "--url", "http://x", "--no-such-flag"])
    with pytest.raises(UsageError, match="No such command"):
        _parse(["sim", "no-such-command"])
    with pytest.raises(UsageError, match="valid number"):
        _parse(["load", "imgcls", "--url", "http://x", "--rate", "fast"])


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed", *shlex.split(command)[1:]], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                               "HOME": str(cwd), "COLUMNS": "160"})


@pytest.mark.parametrize("command", [
    "testbed init --scenario",
    "testbed render open5gs -i inventory.yml -o rendered/open5gs",
    "testbed render ueransim -i inventory.yml -o rendered/ueransim",
])
def test_readme_commands_that_need_nothing_run_as_written(command: str, tmp_path: Path):
    assert command in [c.replace("[--scenario]", "--scenario") for c in COMMANDS] or \
        command in COMMANDS
    (tmp_path / "inventory.yml").write_text((ROOT / "playbooks" / "inventory.example.yml").read_text())
    r = _run(command, tmp_path)
    assert r.returncode == 0, r.stderr
    written = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert len(written) > 1, written
