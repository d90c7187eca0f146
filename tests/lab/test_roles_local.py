"""Roles run for real by ansible-runner on a local connection: the common role's kernel modules
(with a fake modprobe, the one thing this container cannot do) and the load_client role's install."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from testbed.lab.runner import PLAYBOOKS_DIR, PlaybookFailed, run_playbook

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
