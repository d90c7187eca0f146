"""The data-plane commands as a user runs them: a subprocess per command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import namespaces_with_prefix


def testbed(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _file(tmp_path: Path, name: str) -> Path:
    p = tmp_path / "tb.yaml"
    text = (Path("testbed/config/default_testbed.yaml").read_text()
            .replace("name: main", f"name: {name}"))
    p.write_text(text)
    return p


def test_help_lists_commands_with_examples():
    out = testbed("--help", check=True).stdout
    for cmd in ("up", "down", "status", "exec", "traffic", "demo"):
        assert cmd in out
    assert "Example" in testbed("traffic", "iperf", "--help", check=True).stdout


def test_config_error_names_file_line_field_and_exits_nonzero(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("slices:\n  - name: ai\n    sst: 1\n    sd: \"0x1G\"\n    subnet: 10.1.0.0/24\n"
                   "ue_groups:\n  - {name: a, slice: ai}\n")
    proc = testbed("up", "-c", str(bad))
    assert proc.returncode == 2
    assert f"{bad}:4: slices[0].sd:" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.needs_root
def test_up_status_exec_traffic_down(tmp_path, tb_name):
    cfg = _file(tmp_path, tb_name)
    up = testbed("up", "-c", str(cfg), check=True)
    try:
        assert f"up testbed {tb_name}" in up.stdout
        again = testbed("up", "-c", str(cfg))
        assert again.returncode != 0 and "already up" in again.stderr
        st = json.loads(testbed("status", "--name", tb_name, "--json", check=True).stdout)
        assert st["status"] == "up" and len(st["namespaces"]) == 4
        assert {c["slice"] for c in st["classes"]} == {"ai", "be", "-"}
        ex = testbed("exec", "--name", tb_name, "ai", "--", "ip", "-br", "addr", check=True)
        assert "10.45.0.2/24" in ex.stdout
        ping = testbed("exec", "--name", tb_name, "be", "--", "ping", "-c", "1", "-W", "2",
                       "10.200.0.2")
        assert ping.returncode == 0, ping.stdout + ping.stderr
        tr = testbed("traffic", "iperf", "--name", tb_name, "--slice", "be", "--flows", "3",
                     "--duration", "1", "--json", "--out", str(tmp_path / "run"), check=True)
        summary = json.loads(tr.stdout)
        assert len(summary["flows"]) == 3 and summary["total_mbit"] > 1
        assert Path(summary["json"]).exists()
        human = testbed("status", "--name", tb_name, check=True).stdout
        assert "HTB classes" in human and " up " in human and " down " in human
    finally:
        down = testbed("down", "--name", tb_name)
    assert down.returncode == 0 and "down testbed" in down.stdout
    assert namespaces_with_prefix(f"tb-{tb_name}-") == []


@pytest.mark.needs_root
def test_commands_on_a_missing_testbed_fail_clearly(tb_name):
    proc = testbed("status", "--name", tb_name)
    assert proc.returncode != 0 and f"no testbed named '{tb_name}'" in proc.stderr


def test_not_root_is_one_clear_line(monkeypatch):
    from testbed.errors import MissingRequirement
    from testbed.net import cmd

    monkeypatch.setattr(cmd.os, "geteuid", lambda: 1000)
    with pytest.raises(MissingRequirement, match="needs root"):
        cmd.require_root()


def test_missing_binary_names_the_package(monkeypatch):
    from testbed.errors import MissingRequirement
    from testbed.net import cmd

    monkeypatch.setattr(cmd.shutil, "which", lambda name: None)
    with pytest.raises(MissingRequirement, match=r"iperf3 not found: install iperf3 \(apt-get"):
        cmd.require_binaries("iperf3")


def test_exit_codes_of_commands_reach_the_shell(tmp_path):
    """A command that ends with typer.Exit(n) exits n (a failed expect: must fail CI)."""
    (tmp_path / "x.yaml").write_text("name: x\nengine: sim\nduration_s: 60\nservices:\n"
                                     "  - {name: imgcls}\nclients:\n"
                                     "  - {service: imgcls, rate: 1}\n"
                                     "expect:\n  - requests[service=imgcls] > 0\n")
    proc = testbed("run", str(tmp_path / "x.yaml"), "--out", str(tmp_path / "runs"),
                   "--no-progress")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # no request counts in the simulator
    assert "FAIL" in proc.stdout


@pytest.mark.needs_root
def test_down_and_status_never_leave_the_state_dir(tmp_path, state_dir):
    """`--name ../..` once deleted a .json outside the state directory and `status` read any
    JSON file: a name that is not a testbed name stops before it touches a path."""
    victim_dir = tmp_path / "some" / "dir"
    victim_dir.mkdir(parents=True)
    victim = victim_dir / "victim.json"
    victim.write_text(json.dumps({"name": "victim"}))
    rel = os.path.relpath(victim.with_suffix(""), state_dir)
    down = testbed("down", "--name", rel)
    assert down.returncode != 0 and "is not a testbed name" in down.stderr, down.stderr
    assert victim.exists()
    for args in (("status", "--name", ".."), ("status", "--name", rel, "--json"),
                 ("exec", "--name", "../x", "ai", "--", "true")):
        proc = testbed(*args)
        assert proc.returncode != 0 and "is not a testbed name" in proc.stderr, (args, proc.stderr)
    assert victim.exists()


@pytest.mark.needs_root
def test_down_of_a_name_with_no_state_fails_and_empty_name_takes_nothing_down(tmp_path, tb_name):
    cfg = _file(tmp_path, tb_name)
    testbed("up", "-c", str(cfg), check=True)
    try:
        missing = testbed("down", "--name", "nosuch" + tb_name[-4:])
        assert missing.returncode != 0, missing.stdout
        assert "no testbed named 'nosuch" in missing.stderr
        empty = testbed("down", "--name", "")
        assert empty.returncode != 0 and "is not a testbed name" in empty.stderr
        # the only recorded testbed is still up
        st = json.loads(testbed("status", "--name", tb_name, "--json", check=True).stdout)
        assert st["status"] == "up"
        assert len(namespaces_with_prefix(f"tb-{tb_name}-")) == 4
    finally:
        down = testbed("down", "--name", tb_name)
    assert down.returncode == 0, down.stderr
    assert namespaces_with_prefix(f"tb-{tb_name}-") == []


@pytest.mark.needs_root
def test_plain_down_leaves_a_testbed_whose_owner_runs_and_force_says_whose(tmp_path, tb_name):
    """A scenario run owns its testbed; `testbed down` from another terminal once took it away
    mid-cell. Without --name (or with --all) it is refused while the owner runs; --force removes it
    and names the owner; a testbed whose `up` has exited goes down as before."""
    cfg = _file(tmp_path, tb_name)
    owner = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom testbed.bringup.local import LocalTestbed\n"
         "from testbed.config import load_testbed\n"
         f"LocalTestbed(load_testbed({str(cfg)!r})).up()\nprint('up', flush=True)\nsys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "up"
        for args in (("down",), ("down", "--all")):
            refused = testbed(*args)
            assert refused.returncode == 4, (args, refused.stdout + refused.stderr)
            assert f"testbed '{tb_name}' is in use by pid {owner.pid} (" in refused.stderr
            assert "--force" in refused.stderr and refused.stderr.count("\n") == 1
            assert len(namespaces_with_prefix(f"tb-{tb_name}-")) == 4
        forced = testbed("down", "--force")
        assert forced.returncode == 0, forced.stderr
        assert f"down testbed {tb_name}" in forced.stdout
        assert f"it belonged to pid {owner.pid} (" in forced.stdout
        assert namespaces_with_prefix(f"tb-{tb_name}-") == []
    finally:
        owner.communicate("")
        testbed("down", "--name", tb_name)
    testbed("up", "-c", str(cfg), check=True)  # its owner, the `up` command, has exited
    plain = testbed("down")
    assert plain.returncode == 0 and "belonged" not in plain.stdout, plain.stderr
    assert namespaces_with_prefix(f"tb-{tb_name}-") == []
