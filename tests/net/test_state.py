from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from testbed.errors import StateError
from testbed.metrics.host import task_times
from testbed.net.state import (
    ProcessRecord,
    TestbedState,
    create_state,
    live_owner,
    load_state,
    process_start_time,
    recorded_names,
    remove_state,
    save_state,
)
from testbed.pytest_plugin import MachineBehind


def _state(name: str = "x1") -> TestbedState:
    return TestbedState(name=name, prefix=f"tb-{name}", status="building",
                        namespaces=[f"tb-{name}-upf"], spec={"name": name})


def test_create_is_exclusive_and_round_trips():
    s = _state()
    create_state(s)
    with pytest.raises(StateError, match="already up"):
        create_state(_state())
    s.status = "up"
    s.processes.append(ProcessRecord(os.getpid(), "me", process_start_time(os.getpid()) or 0))
    save_state(s)
    back = load_state("x1")
    assert back.status == "up" and back.processes[0].pid == os.getpid()
    assert recorded_names() == ["x1"]
    remove_state("x1")
    assert recorded_names() == []


def test_the_owner_is_recorded_and_live_only_while_its_own_process_runs():
    me = _state()
    assert me.owner_pid == os.getpid() and me.owner_start_time == process_start_time(os.getpid())
    assert live_owner(me) is None  # this process's own testbed: nobody else's
    child = subprocess.Popen([sys.executable, "-c", "import sys; print(1, flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    # between fork and exec the child's command line is still pytest's: wait for its own
    child.stdout.readline()
    try:
        theirs = _state()
        theirs.owner_pid, theirs.owner_start_time = child.pid, process_start_time(child.pid)
        owner = live_owner(theirs)
        assert owner is not None and owner.startswith(f"pid {child.pid} (") and "sys.stdin" in owner
        theirs.owner_start_time += 1  # the pid reused by another process
        assert live_owner(theirs) is None
    finally:
        child.communicate(b"")  # also closes its stdout
    theirs.owner_start_time -= 1
    assert live_owner(theirs) is None  # it exited


def test_a_state_file_without_the_owner_start_time_still_loads(state_dir):
    raw = json.loads(_state().to_json())
    del raw["owner_start_time"]
    (state_dir / "x1.json").write_text(json.dumps(raw))
    assert load_state("x1").owner_start_time is None


def test_missing_state_is_a_clear_error():
    with pytest.raises(StateError, match="no testbed named 'nope'"):
        load_state("nope")


def test_start_time_identifies_a_live_process_only():
    assert process_start_time(os.getpid()) is not None
    assert process_start_time(2**22 + 12345) is None


@pytest.mark.parametrize("bad", ["", "..", "../../x/victim", "/etc/passwd", "a/b", "Main", "x" * 13])
def test_a_name_that_is_not_a_testbed_name_never_becomes_a_path(bad, tmp_path):
    from testbed.net.state import state_path

    with pytest.raises(StateError, match="is not a testbed name"):
        state_path(bad)
    with pytest.raises(StateError, match="is not a testbed name"):
        load_state(bad)
    with pytest.raises(StateError, match="is not a testbed name"):
        remove_state(bad)


def test_recorded_names_ignore_files_that_are_not_testbed_names(state_dir):
    (state_dir / "Not A Name.json").write_text("{}")
    create_state(_state("ok1"))
    assert recorded_names() == ["ok1"]


def _state_within(pid: int, seconds: float) -> str:
    """Process `pid`'s state letter once it is gone or a zombie, or after `seconds` ("gone" when
    it no longer exists)."""
    import time
    from pathlib import Path

    deadline = time.monotonic() + seconds
    state = "?"
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
        except (FileNotFoundError, ProcessLookupError):
            state = "gone"
        if state in ("gone", "Z", "X"):
            break
        time.sleep(0.05)
    return state


def test_a_child_dies_with_its_parent_even_on_sigkill(tmp_path):
    """Issue 13: iperf3 and load clients must not outlive a SIGKILLed harness."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import subprocess, time; from testbed.net.cmd import die_with_parent; "
            "p = subprocess.Popen(['sleep', '60'], preexec_fn=die_with_parent()); "
            "print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(root)})
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    state = _state_within(child, 5.0)
    assert state in ("gone", "Z", "X"), f"child {child} still {state} after its parent was killed"


def test_a_replica_started_without_preexec_ends_with_its_killed_harness():
    """The local cluster starts replicas without a preexec_fn (so Python vforks the harness
    rather than forking it); each replica ties itself to the harness (exit_with_parent)."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import os, subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-m', 'testbed.cluster.serving', '--service', "
            "'chatbot', '--profile', '{\"capacity\": 1, \"queue_limit\": 1, \"proc_time_ms\": "
            "[1, 2], \"startup_ms\": 0, \"slo_ms\": 100}', '--parent-pid', str(os.getpid())], "
            "stdout=subprocess.PIPE); print(p.pid, flush=True); p.stdout.readline(); "
            "print('up', flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(root)})
    child = int(parent.stdout.readline())
    assert parent.stdout.readline().strip() == "up"  # the replica serves
    waited_before = _cpu_wait_s(child)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    # at once, by the signal (its own watch of the parent would notice within a second)
    state = _state_within(child, 0.5)
    if state not in ("gone", "Z", "X"):
        waited = _cpu_wait_s(child) - waited_before
        if waited > 0.25:  # its SIGTERM handler had no core to run on: the machine's
            _state_within(child, 10.0)
            raise MachineBehind(f"the replica waited {waited:.2f} s for a core in the 0.5 s after "
                                "its harness was killed", {})
    assert state in ("gone", "Z", "X"), f"replica {child} still {state} after its harness was killed"


def _cpu_wait_s(pid: int) -> float:
    """Seconds process `pid` has waited for a core (testbed.metrics.host; 0 once gone)."""
    times = task_times(pid)
    return times[1] / 1000 if times is not None else 0.0
