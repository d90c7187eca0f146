"""The host meter over real processes: a process that spins is counted running, one that waits
for a core behind another at a higher priority is counted waiting, and the steal and the other
work's share come from /proc/stat."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from testbed.metrics.host import HostMeter, Second, cpu_ticks, descendants, task_times

SPIN = "import time\nt = time.time()\nwhile time.time() - t < 3: pass\n"

pytestmark = pytest.mark.skipif(task_times(os.getpid()) is None,
                                reason="this kernel keeps no /proc/PID/schedstat")


def test_spinners_pinned_to_one_core_are_counted_running_and_waiting():
    """Three processes spinning on one core never sleep: each second each of them either ran or
    waited for the core, so together they account for three seconds per second, at most one of
    it run (one core) and the rest waited. Other work on core 0 takes from the run, never from
    the sum."""
    procs = [subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", SPIN]) for _ in range(3)]
    try:
        meter = HostMeter(lambda: {"spin": [p.pid for p in procs]}, every_s=1.0)
        meter.start()
        time.sleep(2.05)
        second = meter.sample()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert second is not None and second.procs == {"spin": 3}
    per_s = 1 / second.seconds
    run, wait = (second.run_ms["spin"] / 1000 * per_s, second.wait_ms["spin"] / 1000 * per_s)
    assert 2.7 <= run + wait <= 3.15, second
    assert 0.1 <= run <= 1.05, second  # one core's worth at most
    assert wait >= 1.9, second  # two waiting at any time


def test_the_harness_is_every_descendant_and_others_are_the_rest():
    child = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        assert child.pid in descendants(os.getpid())
        meter = HostMeter(lambda: {}, every_s=0.5, harness_root=os.getpid())
        meter.start()
        time.sleep(1.0)
        second = meter.sample()
    finally:
        child.kill()
        child.wait()
    # the spinning child never sleeps: each of its milliseconds it ran or waited for a core (the
    # other work on a busy machine moves time from run to wait, never out of the sum)
    assert second is not None and second.run_ms["harness"] > 0, second
    spun_ms = second.run_ms["harness"] + second.wait_ms["harness"]
    assert spun_ms >= 0.85 * second.seconds * 1000, second
    total, idle, steal, irq, niced = cpu_ticks()
    assert total > idle >= 0 and steal >= 0 and irq >= 0 and niced >= 0


def _beside(nice: int, harness_nice: int = 0) -> tuple[Second, float]:
    """A Second of a meter whose one harness process sleeps (at `harness_nice`) while a process
    that is not the harness's spins at `nice`, and the spinner's share of all CPUs in it."""
    spin = subprocess.Popen([sys.executable, "-c", SPIN],
                            preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, nice))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"],
                               preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, harness_nice))
    try:
        meter = HostMeter(lambda: {"replicas:x": [sleeper.pid]}, every_s=0.5)
        time.sleep(0.2)
        meter.start()
        spun_before = task_times(spin.pid)
        time.sleep(1.0)
        second = meter.sample()
        spun_after = task_times(spin.pid)
    finally:
        for p in (spin, sleeper):
            p.kill()
            p.wait()
    assert second is not None and spun_before is not None and spun_after is not None
    spun = (spun_after[0] - spun_before[0]) / (1000.0 * second.seconds * second.cpus)
    assert spun >= 0.05, spun  # it got a core now and then, beside whatever else runs
    return second, spun


def test_other_work_at_a_positive_nice_yields_and_at_the_harnesss_priority_takes():
    """A spinner at nice 10 beside a harness at nice 0 is other work that yields (the kernel's
    nice column); the same spinner at nice 0 takes; once a harness process is niced itself, no
    other work is counted as yielding to it. Each bound is the spinner's own share (schedstat),
    less the kernel's tick-sampled accounting's slack: a suite's other workers beside it only
    add to the side they run on."""
    niced, spun = _beside(10)
    assert niced.yielding_share >= 0.7 * spun, (niced, spun)
    level, spun = _beside(0)
    assert level.taking_share >= 0.7 * spun, (level, spun)
    lowered, spun = _beside(10, harness_nice=5)
    assert lowered.yielding_share == 0.0 and lowered.taking_share >= 0.7 * spun, (lowered, spun)


def test_others_share_is_what_neither_the_harness_nor_its_packets_took():
    s = Second(t=0.0, seconds=1.0, steal_share=0.2, busy_share=0.9, run_ms={"clients": 500.0},
               cpus=2, irq_share=0.1)
    assert s.others_share == pytest.approx(0.9 - 0.25 - 0.1)
    assert s.as_json()["others"] == pytest.approx(0.55)
