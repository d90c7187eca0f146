"""The lab's subscriber step (`python -m testbed.core.labstore`): apply, count and remove on the
stores of conftest (embedded always, a real mongod when one is on PATH), an unreachable store as
one line, and the `subscribers` role run for real by ansible-runner on a local connection."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from testbed.config.testbed_spec import TestbedSpec
from testbed.core import labstore
from testbed.core.provision import desired_ues
from testbed.core.store import SubscriberStore
from testbed.lab.bringup import LabStatus, parse_status_events
from testbed.lab.runner import PLAYBOOKS_DIR, PlaybookFailed, run_playbook


def test_apply_writes_every_ue_with_its_slice_then_changes_nothing(store: SubscriberStore,
                                                                   spec: TestbedSpec) -> None:
    want = desired_ues(spec)
    first = labstore.apply(spec, store)
    assert first == {"created": len(want), "updated": 0, "unchanged": 0, "writes": len(want),
                     "subscribers": len(want)}
    by_imsi = {s.imsi: s for s in store.list()}
    for ue in want:  # the slice of each UE's group, as `testbed slice apply` writes it
        sl = spec.slice(ue.slice)
        assert by_imsi[ue.imsi].snssais == [(sl.sst, sl.sd)]
    again = labstore.apply(spec, store)
    assert again["writes"] == 0 and again["unchanged"] == len(want)
    assert labstore.count(spec, store) == {"subscribers": len(want), "expected": len(want),
                                           "store_total": len(want)}


def test_remove_takes_only_the_specs_subscribers(store: SubscriberStore, spec: TestbedSpec) -> None:
    labstore.apply(spec, store)
    other = desired_ues(spec)[0].subscriber.model_copy(update={"imsi": "001019999999999"})
    store.apply([other])
    assert labstore.remove(spec, store) == {"removed": len(desired_ues(spec))}
    assert store.imsis() == ["001019999999999"]
    assert labstore.remove(spec, store) == {"removed": 0}  # `down` twice
    assert labstore.count(spec, store)["subscribers"] == 0


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def _spec_file(tmp_path: Path, spec: TestbedSpec) -> Path:
    path = tmp_path / "testbed-spec.json"
    path.write_text(json.dumps(spec.model_dump(mode="json")))  # what the role copies: testbed_spec
    return path


def test_an_unreachable_store_is_one_line_and_exit_1(tmp_path: Path, spec: TestbedSpec) -> None:
    uri = f"mongodb://127.0.0.1:{_closed_port()}/open5gs"
    proc = subprocess.run([sys.executable, "-m", "testbed.core.labstore", "apply",
                           str(_spec_file(tmp_path, spec)), "--mongo-uri", uri],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith(f"MongoDB at {uri} is unreachable")


def test_a_file_that_is_no_spec_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "spec.json"
    bad.write_text("{}")
    assert labstore.main(["count", str(bad), "--mongo-uri", "mongodb://127.0.0.1:1/x"]) == 1


def test_status_shows_the_count_or_the_stores_line(tmp_path: Path) -> None:
    events = tmp_path / "status.events.jsonl"
    task = "Count the testbed's subscribers in the core's MongoDB"
    ok = {"event": "runner_on_ok", "event_data": {"host": "core1", "task": task, "res": {
        "rc": 0, "stdout": '{"subscribers": 4, "expected": 4, "store_total": 5}'}}}
    down = {"event": "runner_on_ok", "event_data": {"host": "core2", "task": task, "res": {
        "rc": 1, "stdout": "", "stderr": "MongoDB at mongodb://127.0.0.1:27017/open5gs is unreachable"}}}
    events.write_text("\n".join(json.dumps(e) for e in (ok, down)) + "\n")
    st = LabStatus()
    parse_status_events(events, st)
    assert st.subscribers == {"core1": {"subscribers": 4, "expected": 4, "store_total": 5}}
    assert st.problems == ["core2: subscribers: MongoDB at mongodb://127.0.0.1:27017/open5gs is "
                           "unreachable"]


# ---- the role, for real ------------------------------------------------------------------------
SUBSCRIBERS_PLAY = """---
- name: The subscribers role's write
  hosts: core
  gather_facts: false
  tasks:
    - name: Write
      ansible.builtin.include_role:
        name: subscribers
        tasks_from: apply
"""


def test_the_role_stops_on_an_unreachable_store_with_its_line(tmp_path: Path, spec: TestbedSpec) -> None:
    pytest.importorskip("ansible_runner", reason="the lab extra (ansible-runner) is not installed")
    if shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook is not on PATH (pip install ansible-core)")
    pb = tmp_path / "pb"
    pb.mkdir()
    (pb / "roles").symlink_to(PLAYBOOKS_DIR / "roles")
    (pb / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    (pb / "play.yml").write_text(SUBSCRIBERS_PLAY)
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
             "ansible_become": False}
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps({"all": {"children": {"core": {"hosts": {"core1": local}}}}}))
    uri = f"mongodb://127.0.0.1:{_closed_port()}/open5gs"
    extravars = {"testbed_spec": spec.model_dump(mode="json"), "subscribers_python": sys.executable,
                 "subscribers_spec_file": str(tmp_path / "etc" / "testbed-spec.json"),
                 "subscribers_mongo_uri": uri}
    with pytest.raises(PlaybookFailed) as err:
        run_playbook("play.yml", inventory=inv, run_dir=tmp_path / "run", extravars=extravars,
                     playbooks_dir=pb, console=Console(quiet=True))
    f = err.value.failure
    assert f is not None and f.host == "core1"
    assert f.task == "Fail when the subscribers could not be written (before the UEs wait for sessions)"
    assert f.message.startswith(f"MongoDB at {uri} is unreachable") and "\n" not in f.message
    copied = tmp_path / "etc" / "testbed-spec.json"
    assert copied.stat().st_mode & 0o777 == 0o600  # it may hold K/OPc
    assert TestbedSpec.model_validate(json.loads(copied.read_text())) == spec
