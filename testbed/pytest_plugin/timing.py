"""Timed tests beside the others: the pytest-xdist groups that keep testbeds apart, the nice
levels that put a timed test ahead of its neighbours, and MachineBehind for when the machine fell
behind anyway."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTBED_GROUP = "testbed-scenarios"
# The tests that bring up a testbed of their own (to check what it does, not when) share another
# group: one at a time beside the scenarios. Each one's namespaces and qdiscs going up or down
# stalled both cores for 20-48 ms (every client of a scenario late at once).
BESIDE_GROUP = "testbed-beside"
# Under -n, a worker's untimed tests run at WORKER_NICE, below the kernel's own threads (the
# softirq threads that carry a testbed's packets run at nice 0), and a timed test's at 0. Raising
# the timed ones instead (nice -10, or real-time round robin) left the network-heavy scenarios'
# clients 20-50 ms behind their schedule, or starved them behind their own cell's replicas. A test
# that needs root but is not timed (it brings up a testbed to check what it does, not when) runs
# at BESIDE_NICE: ahead of the untimed tests, behind a timed one. At TIMED_NICE, a second testbed
# beside a timed scenario (a policy's planning, its own clients and iperf3 flows) left two
# scenarios' clients 83-128 ms behind beside a CPU-bound process.
WORKER_NICE = 10
BESIDE_NICE = 5
TIMED_NICE = 0


def lower_worker_priority() -> None:
    """In a pytest-xdist worker, as root: this process's tests yield to the timed ones (see
    timed_priority) and to the kernel's threads. Elsewhere nothing changes (without root a timed
    test could not come back up)."""
    if os.geteuid() == 0 and "PYTEST_XDIST_WORKER" in os.environ:
        os.setpriority(os.PRIO_PROCESS, 0, WORKER_NICE)


@contextlib.contextmanager
def timed_priority(nice: int = TIMED_NICE) -> Iterator[None]:
    """Within it, this thread and the threads and processes it starts run at `nice` (TIMED_NICE,
    or BESIDE_NICE for a test that needs root but is not timed), ahead of the workers' untimed
    tests (WORKER_NICE): under pytest-xdist (-n) a test timed against the clock (a testbed
    scenario's cells, a replica's processing times) would otherwise share the cores with the
    other workers' CPU-bound tests and be judged on their load. Only as root and in an xdist
    worker; a no-op elsewhere."""
    if os.geteuid() != 0 or "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


def worker_group(path: Path, engine: str) -> pytest.MarkDecorator:
    """The pytest-xdist group of a scenario's items (`-n N --dist loadgroup`): a file's cells and
    its expect item share one run, so they stay on one worker; every testbed-engine scenario
    shares one group, so no two of them run at once (each is timed against the clock, and two
    would share the cores); a simulator scenario is a group of its own."""
    return pytest.mark.xdist_group(TESTBED_GROUP if engine == "testbed" else f"sim:{path}")


class MachineBehind(Exception):
    """A timed test failed because this machine fell behind (its clients sent late), not because
    of what it tests: `lateness` is the p99 lateness per service (scenario ms) that the check
    measured. The plugin re-runs the test once when `rerun` (calling its `before_rerun()` first,
    when it has one); if it falls behind again it is reported as MACHINE BEHIND."""

    def __init__(self, what: str, lateness: dict[str, float], *, rerun: bool = True):
        super().__init__(what)
        self.lateness = lateness
        self.rerun = rerun
