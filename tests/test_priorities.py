"""The CPU priority each kind of test runs at under pytest-xdist (tests/conftest.py): a timed test
ahead of all, a test that needs root (and may bring up a testbed beside a timed one) between, the
rest behind. A serial run changes nothing."""

import os

import pytest

from testbed.pytest_plugin import BESIDE_NICE, TIMED_NICE, WORKER_NICE

UNDER_XDIST = "PYTEST_XDIST_WORKER" in os.environ and os.geteuid() == 0
pytestmark = pytest.mark.skipif(not UNDER_XDIST, reason="priorities change only under -n, as root")


@pytest.mark.timed
def test_a_timed_test_runs_ahead():
    assert os.getpriority(os.PRIO_PROCESS, 0) == TIMED_NICE


@pytest.mark.needs_root
def test_a_test_that_needs_root_runs_behind_a_timed_one_and_ahead_of_the_rest():
    assert TIMED_NICE < os.getpriority(os.PRIO_PROCESS, 0) == BESIDE_NICE < WORKER_NICE


def test_the_rest_run_behind():
    assert os.getpriority(os.PRIO_PROCESS, 0) == WORKER_NICE
