"""The load client installs and runs on Ubuntu 22.04's Python (3.10) the way the `load_client` role
installs it: the files the role copies, a venv made by the role's command, a plain `pip install`
of that copy (no extras), then `python -m testbed load` against a real local replica."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

from testbed.lab.traffic import REMOTE_LOAD, REMOTE_ROOT
from testbed.profiles import ServiceProfile
from tests.interpreters import python310

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "playbooks" / "roles" / "load_client"
JAMMY_PIP = "22.0.2"  # Ubuntu 22.04's python3-pip
PROFILE = ServiceProfile(capacity=4, queue_limit=100, proc_time_ms=(5, 10), startup_ms=0, slo_ms=500)


def _yaml(name: str) -> list[dict]:
    return yaml.safe_load((ROLE / name).read_text())


def role_install_steps() -> tuple[list[str], dict, dict]:
    """What the role copies to the host, its pip task's arguments, and its defaults."""
    block = next(t for t in _yaml("tasks/install.yml") if "block" in t)["block"]
    pack = next(t for t in block if "ansible.builtin.command" in t)["ansible.builtin.command"]
    assert pack["argv"].rstrip(" }").endswith("+ load_client_files")
    unpack = next(t for t in block if "ansible.builtin.unarchive" in t)
    assert unpack["ansible.builtin.unarchive"]["dest"] == "{{ load_client_dir }}/src"
    pip = next(h for h in _yaml("handlers/main.yml") if "ansible.builtin.pip" in h)
    assert unpack["notify"] == pip["name"]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    return defaults["load_client_files"], pip["ansible.builtin.pip"], defaults


def test_the_role_installs_what_the_lab_runs() -> None:
    items, pip, defaults = role_install_steps()
    assert REMOTE_LOAD[0] == f"{defaults['load_client_venv']}/bin/python"
    assert defaults["load_client_runs_dir"] == REMOTE_ROOT
    assert pip["virtualenv"] == "{{ load_client_venv }}"
    # Ubuntu's own python3 (22.04: 3.10), installed from no other source, with no extras
    assert defaults["load_client_python"] == "python3"
    assert set(pip) == {"name", "virtualenv", "virtualenv_command", "state"}
    assert "[" not in pip["name"]
    assert {"testbed", "pyproject.toml"} <= set(items)


@pytest.mark.slow
@pytest.mark.timeout(900)  # pip fetches numpy, matplotlib & co. on a machine with an empty cache
def test_load_client_installs_and_runs_on_python310(tmp_path: Path) -> None:
    py310 = python310()
    items, pip, _defaults = role_install_steps()
    where = {"load_client_dir": str(tmp_path / "opt"), "load_client_venv": str(tmp_path / "opt" / "venv"),
             "load_client_python": py310}

    def render(text: str) -> str:
        return jinja2.Template(text, undefined=jinja2.StrictUndefined).render(where)

    src = Path(render(pip["name"]))
    src.mkdir(parents=True)
    for item in items:
        path = ROOT / item
        if path.is_dir():
            shutil.copytree(path, src / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / item)
    venv = Path(render(pip["virtualenv"]))
    subprocess.run([*render(pip["virtualenv_command"]).split(), str(venv)], check=True, timeout=120)
    # the pip that `python3 -m venv` puts into a venv on Ubuntu 22.04 (python3-pip-whl)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"pip=={JAMMY_PIP}"],
                   check=True, timeout=300)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(src)],
                               capture_output=True, text=True, timeout=840)
    assert installed.returncode == 0, installed.stderr[-3000:]

    python = str(venv / "bin" / "python")
    # run outside the checkout, so that the venv's copy is imported and not ./testbed
    probe = "import sys, testbed; print(sys.version_info[:2] == (3, 10), testbed.__file__)"
    which = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=tmp_path, check=True)
    is_310, imported = which.stdout.split()
    assert is_310 == "True" and Path(imported).is_relative_to(venv), which.stdout

    replica = subprocess.Popen([sys.executable, "-m", "testbed.cluster.serving", "--service", "chatbot",
                                "--profile", PROFILE.model_dump_json()], stdout=subprocess.PIPE, cwd=ROOT)
    out = tmp_path / "records.jsonl"
    try:
        line = replica.stdout.readline().decode()
        assert line.startswith("LISTENING "), line
        url = f"http://127.0.0.1:{int(line.split()[1])}"
        load = subprocess.run([python, *REMOTE_LOAD[1:], "chatbot", "--url", url, "--rate", "20",
                               "--duration", "1.5", "--out", str(out), "--quiet", "--slice", "embb",
                               "--source", "127.0.0.1"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=120)
    finally:
        replica.terminate()
        replica.wait(10)
    assert load.returncode == 0, load.stdout[-2000:] + load.stderr[-2000:]
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(records) >= 25  # 20 req/s for 1.5 s
    assert {(r["service"], r["slice"], r["error"]) for r in records} == {("chatbot", "embb", None)}
    assert len({r["seq"] for r in records}) == len(records)
