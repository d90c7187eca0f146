"""The lab driver with the real ansible-runner against localhost: progress, events, failures, check mode."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from testbed.config import load_testbed
from testbed.errors import ConfigError, MissingRequirement
from testbed.lab.bringup import (
    LabStatus,
    gnb_address,
    lab_up,
    parse_status_events,
    prepare_rendered,
    upf_instances,
)
from testbed.lab.inventory import LabInventory
from testbed.lab.render import render_lab
from testbed.lab.runner import PLAYBOOKS_DIR, EventRecorder, PlaybookFailed, failure_message, run_playbook

EXAMPLE_INVENTORY = Path(__file__).resolve().parents[2] / "playbooks" / "inventory.example.yml"


def _rendered(tmp_path: Path) -> Path:
    """What `testbed render -i` writes for the default testbed and the example inventory."""
    out = tmp_path / "rendered"
    render_lab(load_testbed(), LabInventory.load(EXAMPLE_INVENTORY), out)
    return out


def _runner_or_skip() -> None:
    pytest.importorskip("ansible_runner", reason="the lab extra (ansible-runner) is not installed")
    if shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook is not on PATH (pip install ansible-core)")


def _local_inventory(tmp_path: Path, groups: dict[str, list[str]] | None = None) -> Path:
    groups = groups or {}
    lines = ["all:", "  children:"]
    for g in ("core", "ran", "cluster_server", "cluster_agents", "gpu_nodes", "traffic"):
        hosts = groups.get(g, [])
        lines.append(f"    {g}:")
        if hosts:
            lines.append("      hosts:")
            lines += [f"        {h}: {{ansible_connection: local, "
                      f"ansible_python_interpreter: '{{{{ ansible_playbook_python }}}}'}}" for h in hosts]
    inv = tmp_path / "inventory.yml"
    inv.write_text("\n".join(lines) + "\n")
    return inv


def _playbooks(tmp_path: Path, body: str) -> Path:
    d = tmp_path / "pb"
    d.mkdir()
    (d / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    (d / "site.yml").write_text(body)
    return d


def test_failure_names_host_and_task_and_keeps_the_log(tmp_path: Path) -> None:
    _runner_or_skip()
    pb = _playbooks(tmp_path, """---
- name: Two steps
  hosts: core
  gather_facts: false
  any_errors_fatal: true
  tasks:
    - name: Harmless probe
      ansible.builtin.command:
        argv: ["true"]
      changed_when: false
    - name: Step that fails
      ansible.builtin.command:
        argv: [ls, /nonexistent-tb-path]
      changed_when: false
    - name: Never reached
      ansible.builtin.command:
        argv: ["true"]
      changed_when: false
""")
    inv = _local_inventory(tmp_path, {"core": ["corehost"]})
    out = Console(record=True, width=120)
    with pytest.raises(PlaybookFailed) as err:
        run_playbook("site.yml", inventory=inv, run_dir=tmp_path / "run", extravars={},
                     playbooks_dir=pb, console=out)
    f = err.value.failure
    assert f is not None and (f.host, f.task, f.play) == ("corehost", "Step that fails", "Two steps")
    assert "nonexistent-tb-path" in f.message
    assert "host corehost failed at task 'Step that fails'" in str(err.value)
    events = [json.loads(line) for line in err.value.log.read_text().splitlines()]
    tasks = [e["event_data"]["task"] for e in events if e["event"] == "playbook_on_task_start"]
    assert tasks == ["Harmless probe", "Step that fails"]
    assert (tmp_path / "run" / "ansible" / "artifacts").is_dir()  # runner's own artifacts too
    shown = out.export_text()
    assert "stopped on corehost" in shown and "Step that fails" in shown


def test_unreachable_host_is_reported_as_such(tmp_path: Path) -> None:
    _runner_or_skip()
    pb = _playbooks(tmp_path, """---
- name: Reach it
  hosts: core
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
""")
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  children:\n    core:\n      hosts:\n        ghost:\n"
                   "          ansible_host: 127.0.0.1\n          ansible_port: 1\n"
                   "          ansible_ssh_common_args: '-o ConnectTimeout=2 -o StrictHostKeyChecking=no'\n")
    with pytest.raises(PlaybookFailed) as err:
        run_playbook("site.yml", inventory=inv, run_dir=tmp_path / "run", extravars={},
                     playbooks_dir=pb, console=Console(file=open("/dev/null", "w")))  # noqa: SIM115
    f = err.value.failure
    assert f is not None and f.unreachable and f.host == "ghost" and f.task == "Ping"


def test_site_playbook_runs_in_check_mode_with_prepared_run_dir(tmp_path: Path) -> None:
    """The real site.yml through ansible-runner with empty groups: every play parses and is skipped."""
    _runner_or_skip()
    spec = load_testbed()
    result = lab_up(spec, _local_inventory(tmp_path), check=True, run_dir=tmp_path / "run",
                    rendered_dir=_rendered(tmp_path),
                    console=Console(file=open("/dev/null", "w")))  # noqa: SIM115
    assert result.status == "successful" and result.total_changed == 0
    lab = json.loads((tmp_path / "run" / "lab.json").read_text())
    assert lab["check"] is True
    # the services' manifests, generated from their profiles, are what the services role applies
    manifests = Path(lab["extravars"]["testbed_manifests_dir"])
    assert manifests == (tmp_path / "run" / "rendered" / "workloads").resolve()
    assert {"chatbot", "imgcls", "tts"} <= {p.parent.name for p in manifests.glob("*/k8s.yaml")}
    upfs = lab["extravars"]["testbed_upf_instances"]
    assert [(u["stem"], u["n3"]) for u in upfs] == [("upf-ai", ["192.168.10.11"]),
                                                    ("upf-be", ["192.168.10.12"])]
    assert lab["extravars"]["testbed_gnb_address"] == "192.168.10.20"  # the inventory's
    script = tmp_path / "run" / "rendered" / "shaping" / "tb-slice-shaping.sh"
    assert "match ip src 10.45.0.0/24" in script.read_text()
    events = result.events_file.read_text()
    assert "site-check.events.jsonl" in result.events_file.name and "playbook_on_stats" in events


def test_prepare_rendered_reports_missing_parts(tmp_path: Path) -> None:
    spec = load_testbed()
    broken = _rendered(tmp_path)
    (broken / "ueransim" / "ue-be.yaml").unlink()
    with pytest.raises(MissingRequirement, match=r"no ue-be\.yaml for UE group 'be'"):
        prepare_rendered(spec, tmp_path / "run", broken)
    with pytest.raises(MissingRequirement, match="open5gs is missing"):
        prepare_rendered(spec, tmp_path / "run2", tmp_path / "nothing")
    with pytest.raises(MissingRequirement, match="needs its inventory"):
        prepare_rendered(spec, tmp_path / "run3", None)  # nothing to render the addresses from
    assert not (tmp_path / "run3").exists()


def test_upf_instances_default_gateway_and_device(tmp_path: Path) -> None:
    (tmp_path / "open5gs").mkdir()
    (tmp_path / "open5gs" / "upf-x.yaml").write_text("upf:\n  session:\n    - subnet: 10.9.0.0/16\n")
    assert upf_instances(tmp_path) == [
        {"stem": "upf-x", "sessions": [{"subnet": "10.9.0.0/16", "gateway": "10.9.0.1", "dev": "ogstun"}],
         "n3": []}]
    (tmp_path / "ueransim").mkdir()
    (tmp_path / "ueransim" / "gnb.yaml").write_text("mcc: '001'\nngapIp: 192.0.2.9\n")
    with pytest.raises(ConfigError, match=r"gnb\.yaml:1: gtpIp: the gNB needs its GTP-U address"):
        gnb_address(tmp_path)
    (tmp_path / "ueransim" / "gnb.yaml").write_text("mcc: '001'\ngtpIp: 192.0.2.9\n")
    assert gnb_address(tmp_path) == "192.0.2.9"
    (tmp_path / "open5gs" / "upf-y.yaml").write_text("upf:\n  pfcp: {}\n")
    with pytest.raises(Exception, match=r"upf-y.yaml.*upf.session"):
        upf_instances(tmp_path)


def test_recorder_and_status_parsing(tmp_path: Path) -> None:
    rec = EventRecorder(tmp_path / "e.jsonl")
    units = ["tb-open5gs-amf.service loaded active running testbed AMF",
             "tb-slice-shaping.service loaded active exited x"]
    ok = {"event": "runner_on_ok", "event_data": {
        "host": "core1", "task": "List the testbed units", "res": {"changed": False, "stdout_lines": units}}}
    addrs = ["5: uesimtun0    inet 10.45.0.2/32 scope global uesimtun0",
             "1: lo    inet 127.0.0.1/8 scope host lo"]
    ue = {"event": "runner_on_ok", "event_data": {
        "host": "ran1", "task": "List the UE addresses (one per PDU session)",
        "res": {"stdout_lines": addrs}}}
    ignored = {"event": "runner_on_failed", "event_data": {"host": "x", "task": "t", "ignore_errors": True,
                                                            "res": {"msg": "fine"}}}
    secret = {"event": "runner_on_failed", "event_data": {"host": "core1", "task": "Join", "play": "p",
                                                           "res": {"censored": "the output has been hidden"}}}
    for ev in (ok, ue, ignored, secret):
        rec(ev)
    rec.close()
    assert rec.failure is not None and rec.failure.task == "Join" and "no_log" in rec.failure.message
    st = LabStatus()
    parse_status_events(tmp_path / "e.jsonl", st)
    assert st.units["core1"] == [("tb-open5gs-amf.service", "running"),
                                 ("tb-slice-shaping.service", "exited")]
    assert st.ue_addresses == {"ran1": ["10.45.0.2/32"]}
    assert failure_message({"stderr": "a\n  b", "stdout": "x"}) == "a b: x"
    assert failure_message({"msg": "non-zero return code", "stderr": "ls: no such file"}) == \
        "non-zero return code: ls: no such file"


def _role_task(role: str, name_start: str) -> dict:
    tasks = yaml.safe_load((PLAYBOOKS_DIR / "roles" / role / "tasks" / "main.yml").read_text())
    (task,) = [t for t in tasks if t["name"].startswith(name_start)]
    return task


def _host_address() -> str:
    ip = shutil.which("ip")
    out = subprocess.run([ip, "-o", "-4", "addr", "show", "scope", "global"], capture_output=True,
                         text=True, check=True).stdout if ip else ""
    found = re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
    if not found:
        pytest.skip("this host has no global IPv4 address to stand for an N3/gNB address")
    return found[0]


@pytest.mark.parametrize(("role", "task", "extravars", "group"), [
    ("upf", "Check that this host has every UPF's N3 address",
     lambda a: {"testbed_upf_instances": [{"stem": "upf-ai", "n3": [a], "sessions": []}]}, "core"),
    ("ueransim", "Check that this host has the gNB's address",
     lambda a: {"testbed_gnb_address": a}, "ran"),
])
def test_roles_stop_when_the_host_lacks_a_rendered_address(tmp_path: Path, role: str, task: str,
                                                            extravars, group: str) -> None:
    """The real role task against localhost: passes with an address the host has, and stops
    naming the address when the host lacks it (192.0.2.250 is TEST-NET-1, never assigned here)."""
    _runner_or_skip()
    mine = _host_address()
    play = [{"name": "Address check", "hosts": group, "gather_facts": True,
             "tasks": [_role_task(role, task)]}]
    pb = _playbooks(tmp_path, yaml.safe_dump(play, sort_keys=False))
    inv = _local_inventory(tmp_path, {group: ["labhost"]})
    quiet = Console(file=open("/dev/null", "w"))  # noqa: SIM115
    ok = run_playbook("site.yml", inventory=inv, run_dir=tmp_path / "ok", extravars=extravars(mine),
                      playbooks_dir=pb, console=quiet)
    assert ok.status == "successful"
    absent = "192.0.2.250" if mine != "192.0.2.250" else "192.0.2.251"
    with pytest.raises(PlaybookFailed) as err:
        run_playbook("site.yml", inventory=inv, run_dir=tmp_path / "bad",
                     extravars=extravars(absent), playbooks_dir=pb, console=quiet)
    f = err.value.failure
    assert f is not None and f.task.startswith(task) and absent in f.message, f
