"""Roles run for real by ansible-runner on a local connection: the common role's kernel modules
(with a fake modprobe, the one thing this container cannot do) and the load_client role's install."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from testbed.lab.runner import PLAYBOOKS_DIR, PlaybookFailed, run_playbook
from testbed.lab.traffic import REMOTE_LOAD
from testbed.profiles import ServiceProfile
from tests.interpreters import python310, ubuntu_jammy_venv

FAKE_MODPROBE = f"""#!{sys.executable}
# FAKE modprobe for the common role's tests: logs its arguments and answers as
# FAKE_MODPROBE_PLAN says per module (missing, missing-once, builtin; anything else loads).
import json, os, sys
module = sys.argv[-1]
with open(os.environ["FAKE_MODPROBE_LOG"], "a+") as log:
    log.seek(0)
    earlier = [line.split()[-1] for line in log]
    log.write(" ".join(sys.argv[1:]) + "\\n")
plan = json.loads(os.environ["FAKE_MODPROBE_PLAN"]).get(module)
if plan == "missing" or (plan == "missing-once" and module not in earlier):
    sys.exit(f"modprobe: FATAL: Module {{module}} not found in directory /lib/modules/6.8.0-1012-aws")
if plan == "builtin" and "--first-time" in sys.argv:
    sys.exit(f"modprobe: ERROR: could not insert '{{module}}': Module {{module}} is builtin")
"""


def _runner_or_skip() -> None:
    pytest.importorskip("ansible_runner", reason="the lab extra (ansible-runner) is not installed")
    if shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook is not on PATH (pip install ansible-core)")


def _project(tmp_path: Path, play: str, hosts: dict[str, dict]) -> tuple[Path, Path]:
    """A playbook directory using the real roles, and an inventory of local-connection hosts."""
    pb = tmp_path / "pb"
    pb.mkdir()
    (pb / "roles").symlink_to(PLAYBOOKS_DIR / "roles")
    (pb / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    (pb / "play.yml").write_text(play)
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inventory = {"all": {"children": {"ran": {"hosts": {h: {**local, **v} for h, v in hosts.items()}}}}}
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps(inventory))
    return pb, inv


def _results(log: Path, task: str) -> dict[str, str]:
    """host -> how `task` ended (ok, changed, skipped, failed) from the run's event log."""
    ends = {"runner_on_ok": "ok", "runner_on_skipped": "skipped", "runner_on_failed": "failed"}
    out = {}
    for line in log.read_text().splitlines():
        e = json.loads(line)
        data = e.get("event_data") or {}
        if e["event"] in ends and data.get("task") == task:
            changed = e["event"] == "runner_on_ok" and data["res"].get("changed")
            out[data["host"]] = "changed" if changed else ends[e["event"]]
    return out


MODULES_PLAY = """---
- name: The common role's kernel modules
  hosts: ran
  gather_facts: false
  environment:
    PATH: "{{ fake_bin }}:{{ lookup('ansible.builtin.env', 'PATH') }}"
    FAKE_MODPROBE_LOG: "{{ fake_log }}"
    FAKE_MODPROBE_PLAN: "{{ fake_plan | to_json }}"
  tasks:
    - name: Load them
      ansible.builtin.include_role:
        name: common
        tasks_from: modules
"""


def test_a_module_that_does_not_load_installs_the_extra_modules_package_then_loads(tmp_path: Path) -> None:
    _runner_or_skip()
    if subprocess.run(["/usr/bin/python3", "-c", "import apt"], capture_output=True).returncode != 0:
        pytest.skip("the apt module needs python3-apt (/usr/bin/python3 -c 'import apt')")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "modprobe").write_text(FAKE_MODPROBE)
    (fake_bin / "modprobe").chmod(0o755)
    # the extra package stands in for linux-modules-extra-$(uname -r) with one that is installed
    # (scripts/setup installs iproute2), so apt answers "ok" without touching the system
    hosts = {
        "loads": {"fake_plan": {}, "common_modules_extra_package": "iproute2"},
        "ubuntu": {"fake_plan": {"sctp": "missing-once", "tun": "builtin"},
                   "common_modules_extra_package": "iproute2"},
        "other_os": {"fake_plan": {"sctp": "missing"}, "common_modules_extra_package": ""},
    }
    for h, v in hosts.items():
        v.update(fake_bin=str(fake_bin), fake_log=str(tmp_path / f"{h}.log"))
    pb, inv = _project(tmp_path, MODULES_PLAY, hosts)
    with pytest.raises(PlaybookFailed) as err:
        run_playbook("play.yml", inventory=inv, run_dir=tmp_path / "run", extravars={},
                     playbooks_dir=pb, console=Console(quiet=True))
    failure = err.value.failure
    assert failure is not None
    assert (failure.host, failure.task) == ("other_os", "Fail when a kernel module still does not load")
    assert failure.message == (
        "modprobe: FATAL: Module sctp not found in directory /lib/modules/6.8.0-1012-aws "
        "(package tried: none on this OS; docs/lab.md, Troubleshooting)")

    installs = _results(err.value.log, "Install the kernel's extra modules package")
    assert installs == {"loads": "skipped", "ubuntu": "ok", "other_os": "skipped"}
    retries = _results(err.value.log, "Load the modules that were missing")
    assert retries == {"loads": "skipped", "ubuntu": "changed", "other_os": "ok"}
    calls = {h: (tmp_path / f"{h}.log").read_text().splitlines() for h in hosts}
    first = ["--first-time sctp", "--first-time tun", "--first-time ifb"]
    assert calls == {"loads": first, "ubuntu": [*first, "sctp"], "other_os": [*first, "sctp"]}


LOAD_CLIENT_PLAY = """---
- name: The load_client role's install
  hosts: ran
  gather_facts: false
  tasks:
    - name: Install
      ansible.builtin.include_role:
        name: load_client
        tasks_from: install
"""


@pytest.mark.slow
@pytest.mark.timeout(900)  # pip fetches numpy, matplotlib & co. on a machine with an empty cache
def test_load_client_role_installs_into_a_python310_venv_and_again_only_on_change(tmp_path: Path) -> None:
    """The role on Ubuntu 22.04's Python (3.10) and pip: check mode changes nothing, the install
    runs the load client against a real replica, a second run changes nothing, a changed file
    installs again. (One install serves all four: each costs a minute or two of pip.)"""
    _runner_or_skip()
    if os.geteuid() != 0:
        pytest.skip("the role makes its files root's (owner: root)")
    py310 = python310()
    checkout = tmp_path / "checkout"  # a copy, so that the test can change a file in it
    shutil.copytree(PLAYBOOKS_DIR.parent / "testbed", checkout / "testbed",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(PLAYBOOKS_DIR.parent / name, checkout / name)
    opt = tmp_path / "opt"
    where = {"load_client_dir": str(opt), "load_client_venv": str(opt / "venv"),
             "load_client_runs_dir": str(tmp_path / "runs"), "load_client_python": py310,
             "load_client_source": str(checkout)}
    pb, inv = _project(tmp_path, LOAD_CLIENT_PLAY, {"ue_host": {}})
    checked = run_playbook("play.yml", inventory=inv, run_dir=tmp_path / "check", extravars=where,
                           playbooks_dir=pb, console=Console(quiet=True), check=True)
    assert checked.changed == {"ue_host": 1} and not opt.exists()  # would make the directories
    # the venv as Ubuntu 22.04 has it when the role's pip task makes it: the role's own command,
    # with the pip that `python3 -m venv` puts there (python3-pip-whl); the role installs into it
    venv_python = ubuntu_jammy_venv(py310, opt / "venv")
    first = run_playbook("play.yml", inventory=inv, run_dir=tmp_path / "run1", extravars=where,
                         playbooks_dir=pb, console=Console(quiet=True))
    assert _results(first.events_file, "Install the load client into its virtual environment") == \
        {"ue_host": "changed"}
    probe = "import sys, testbed.load.client; print(sys.version_info[:2] == (3, 10), testbed.__file__)"
    which = subprocess.run([str(opt / "venv" / "bin" / "python"), "-c", probe], capture_output=True,
                           text=True, cwd=tmp_path, check=True)
    is_310, imported = which.stdout.split()
    assert is_310 == "True" and Path(imported).is_relative_to(opt / "venv"), which.stdout
    assert (tmp_path / "runs").is_dir()
    load_runs_against_a_real_replica(venv_python, tmp_path)

    again = run_playbook("play.yml", inventory=inv, run_dir=tmp_path / "run2", extravars=where,
                         playbooks_dir=pb, console=Console(quiet=True))
    assert again.total_changed == 0
    assert _results(again.events_file, "Install the load client into its virtual environment") == {}

    changed = checkout / "testbed" / "load" / "__init__.py"
    changed.write_text(changed.read_text() + "# changed by the test\n")
    third = run_playbook("play.yml", inventory=inv, run_dir=tmp_path / "run3", extravars=where,
                         playbooks_dir=pb, console=Console(quiet=True))
    assert _results(third.events_file, "Install the load client into its virtual environment") == \
        {"ue_host": "changed"}
    installed = Path(imported).parent / "load" / "__init__.py"
    assert installed.read_text().endswith("# changed by the test\n")


def load_runs_against_a_real_replica(python: Path, cwd: Path) -> None:
    """`python -m testbed load` from the role's venv (`python`) against a real local replica, as
    the lab runs it on a UE host: every record answered, in its slice, numbered once."""
    profile = ServiceProfile(capacity=4, queue_limit=100, proc_time_ms=(5, 10), startup_ms=0, slo_ms=500)
    replica = subprocess.Popen([sys.executable, "-m", "testbed.cluster.serving", "--service", "chatbot",
                                "--profile", profile.model_dump_json()], stdout=subprocess.PIPE,
                               cwd=PLAYBOOKS_DIR.parent)
    out = cwd / "records.jsonl"
    try:
        line = replica.stdout.readline().decode()
        assert line.startswith("LISTENING "), line
        url = f"http://127.0.0.1:{int(line.split()[1])}"
        # run outside the checkout, so that the venv's copy is imported and not ./testbed
        load = subprocess.run([str(python), *REMOTE_LOAD[1:], "chatbot", "--url", url, "--rate", "20",
                               "--duration", "1.5", "--out", str(out), "--quiet", "--slice", "embb",
                               "--source", "127.0.0.1"],
                              capture_output=True, text=True, cwd=cwd, timeout=120)
    finally:
        replica.terminate()
        replica.wait(10)
    assert load.returncode == 0, load.stdout[-2000:] + load.stderr[-2000:]
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(records) >= 25  # 20 req/s for 1.5 s
    assert {(r["service"], r["slice"], r["error"]) for r in records} == {("chatbot", "embb", None)}
    assert len({r["seq"] for r in records}) == len(records)
