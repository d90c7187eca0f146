from __future__ import annotations

import os

import pytest

from testbed.errors import StateError
from testbed.net.state import (
    ProcessRecord,
    TestbedState,
    create_state,
    load_state,
    process_start_time,
    recorded_names,
    remove_state,
    save_state,
)


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


def test_a_child_dies_with_its_parent_even_on_sigkill(tmp_path):
    """Issue 13: iperf3 and load clients must not outlive a SIGKILLed harness."""
    import os
    import signal
    import subprocess
    import sys
    import time
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
    deadline = time.monotonic() + 5
    state = "?"
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{child}/stat").read_text().split(") ", 1)[1][0]
        except (FileNotFoundError, ProcessLookupError):
            state = "gone"
        if state in ("gone", "Z", "X"):
            break
        time.sleep(0.05)
    assert state in ("gone", "Z", "X"), f"child {child} still {state} after its parent was killed"
