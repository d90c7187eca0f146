"""Shared fixtures: isolated state directory, unique testbed names, root/namespace checks."""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.pytest_plugin import BESIDE_NICE, timed_priority


def default_sigint() -> None:
    """A child's preexec_fn: SIGINT back to its default. A shell that runs the tests in the
    background (`cmd &`, a CI script's job) starts them with SIGINT ignored, children inherit
    that, and a test's Ctrl-C to `testbed run` would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cpu_wait_s() -> float:
    """Seconds this thread has waited for a core since it started (the run delay of
    /proc/thread-self/schedstat; 0.0 where the kernel does not keep it): a timed test subtracts
    what it waited over a measurement from what it measured, which leaves the code's own time."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


@functools.cache
def has_netns() -> tuple[bool, str]:
    """Whether this process can make network namespaces, probed once, when the first test that
    needs them runs (collecting the tests changes nothing on the machine)."""
    if os.geteuid() != 0:
        return False, "needs root for network namespaces"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"needs {tool} (iproute2)"
    probe = f"tbprobe{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    if made.returncode != 0:
        return False, f"cannot create network namespaces: {made.stderr.decode().strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return True, ""


@pytest.fixture(autouse=True)
def _skip_without_netns(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("needs_root") is not None:
        ok, why = has_netns()
        if not ok:
            pytest.skip(why)


@pytest.fixture(autouse=True)
def _timed_first(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tests marked `timed` run ahead of the other workers' tests in the CPU's queue
    (testbed.pytest_plugin.timed_priority): they assert on time. Those that need namespaces (and
    may bring up a testbed) run between the two (BESIDE_NICE)."""
    node = request.node
    if node.get_closest_marker("timed") is not None:
        with timed_priority():
            yield
    elif node.get_closest_marker("needs_root") is not None:
        with timed_priority(BESIDE_NICE):
            yield
    else:
        yield


@pytest.fixture(autouse=True)
def state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Every test records testbeds in its own state directory, never in /run/testbed."""
    d = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("TESTBED_STATE_DIR", str(d))
    return d


@pytest.fixture
def tb_name() -> str:
    """A testbed name unique to this test (namespaces are tb-<name>-...)."""
    return "t" + secrets.token_hex(4)


def run_scenario_cli(scenario: Path, out: Path, timeout_s: float = 240
                     ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`testbed run SCENARIO --out OUT --no-progress` as a user runs it; the process and the
    directory of its one cell's first repetition (None when it made none)."""
    run = subprocess.run([sys.executable, "-m", "testbed", "run", str(scenario), "--out", str(out),
                          "--no-progress"], capture_output=True, text=True, timeout=timeout_s,
                         env=dict(os.environ, COLUMNS="200"))
    cells = sorted(out.glob("*/cells/*/rep-0"))
    return run, (cells[0] if cells else None)


def namespaces_with_prefix(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]
