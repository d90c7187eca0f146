"""What the `load_client` role installs is what the lab runs: the files it copies, a venv made with
the distribution's own python3, a plain `pip install` of that copy (no extras). The install itself,
on Ubuntu 22.04's Python (3.10) and pip, and a load run from it against a real replica, is
tests/lab/test_roles_local.py's."""

from __future__ import annotations

from pathlib import Path

import yaml

from testbed.lab.traffic import REMOTE_LOAD, REMOTE_ROOT

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "playbooks" / "roles" / "load_client"


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
