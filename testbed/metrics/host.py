"""What the host did to a timed cell, from /proc: the share of CPU time the hypervisor stole
(/proc/stat's steal), how busy the host was, and for each of the cell's process groups (clients,
each service's replicas, the runner, iperf3) how long its threads ran and how long they waited
for a core (/proc/PID/task/TID/schedstat's run delay), second by second.

A figure late or slow while the harness's processes waited for a core that others held (steal, or
work beside the harness) is the machine's; one while the harness itself filled the cores is the
product's own cost (`Second.others_share`). Interrupt and softirq time (the emulated network's
packets, which the scenario's own traffic makes) count as the harness's. Other work at a lower
priority than the harness (a positive nice while the harness runs at 0 or below: a suite's
untimed workers, a niced batch job) only takes what the harness leaves idle, so it is counted
apart (`Second.yielding_share`): beside two such spinners a scenario's figures came out the same
as on an idle host, request for request, while they held 75-85 % of the CPUs."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal (guest time is in user)
_NICE, _IDLE, _IOWAIT, _IRQ, _SOFTIRQ, _STEAL = 1, 3, 4, 5, 6, 7


def cpu_ticks(proc: Path = PROC) -> tuple[int, int, int, int, int] | None:
    """(total, idle including iowait, steal, irq and softirq, user time at a positive nice)
    clock ticks of all CPUs since boot; None where /proc/stat cannot be read."""
    try:
        line = (proc / "stat").read_text().split("\n", 1)[0]
    except OSError:
        return None
    ticks = [int(x) for x in line.split()[1:9]]
    return (sum(ticks), ticks[_IDLE] + ticks[_IOWAIT], ticks[_STEAL], ticks[_IRQ] + ticks[_SOFTIRQ],
            ticks[_NICE])


def _after_comm(stat: str) -> list[str]:
    """The fields of a /proc/PID/stat line after "(comm)" (a name may hold spaces and
    parentheses): the state first, then ppid, ... (field 3 onwards)."""
    return stat[stat.rindex(")") + 2:].split()


def process_nice(pid: int, proc: Path = PROC) -> int | None:
    """The nice value of process `pid` (its main thread's), None when it is gone."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(_after_comm(stat)[16])  # field 19


def task_times(pid: int, proc: Path = PROC) -> tuple[float, float] | None:
    """(ms run, ms waited for a core) summed over the threads of process `pid` since each began;
    None when it is gone (or the kernel keeps no schedstat)."""
    run = wait = 0
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:
            continue  # a thread that just ended
        run += int(fields[0])
        wait += int(fields[1])
    return run / 1e6, wait / 1e6


def descendants(pid: int, proc: Path = PROC) -> list[int]:
    """Every process below `pid` in the process tree (children, theirs, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(_after_comm(stat)[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


@dataclass
class Second:
    """One interval of the meter (about a wall second): the host's shares of CPU time stolen and
    busy (of all CPUs), and per process group the ms its threads ran and waited for a core."""

    t: float  # epoch seconds at its end
    seconds: float
    steal_share: float
    busy_share: float  # not idle, steal included
    run_ms: dict[str, float] = field(default_factory=dict)
    wait_ms: dict[str, float] = field(default_factory=dict)
    cpus: int = 1
    irq_share: float = 0.0  # interrupts and softirqs: the packets of the emulated network
    procs: dict[str, int] = field(default_factory=dict)  # processes seen per group
    # user time at a positive nice, less the harness's own niced helpers' (the live page's
    # server): other work that only gets what the harness leaves; 0 when a process of the
    # harness's groups ran at a positive nice itself (the run niced as a whole)
    niced_share: float = 0.0

    @property
    def others_share(self) -> float:
        """The share of all CPUs' time that neither the harness's groups ran, nor its packets
        took (interrupts), nor stood idle: the hypervisor's steal and the work of other
        processes on the host."""
        ours = sum(self.run_ms.values()) / (1000.0 * self.seconds * self.cpus)
        return max(0.0, self.busy_share - ours - self.irq_share)

    @property
    def yielding_share(self) -> float:
        """The part of `others_share` that ran at a lower priority than the harness (it yields
        the cores whenever a harness process wants one)."""
        return min(self.niced_share, self.others_share)

    @property
    def taking_share(self) -> float:
        """The part of `others_share` that competed with the harness for the cores: the
        hypervisor's steal and other work at the harness's priority or above."""
        return self.others_share - self.yielding_share

    def as_json(self) -> dict[str, object]:
        """One line of a cell's host.jsonl."""
        return {"t": round(self.t, 3), "seconds": round(self.seconds, 3),
                "steal": round(self.steal_share, 4), "busy": round(self.busy_share, 4),
                "irq": round(self.irq_share, 4), "others": round(self.others_share, 4),
                "yielding": round(self.yielding_share, 4), "taking": round(self.taking_share, 4),
                "run_ms": {k: round(v, 1) for k, v in self.run_ms.items()},
                "wait_ms": {k: round(v, 1) for k, v in self.wait_ms.items()},
                "procs": dict(self.procs)}


class HostMeter:
    """Samples the host and the groups `groups()` names (group -> pids) when `sample()` is
    called (at most once per `every_s`): each Second's differences since the last sample. A
    process first seen counts from its start (its schedstat counts from there), one that ended
    keeps its last reading. With `harness_root`, every other descendant of that process is the
    group "harness" (looked up every `rescan_s`: a scan of /proc takes milliseconds)."""

    def __init__(self, groups: Callable[[], Mapping[str, list[int]]], *, every_s: float = 1.0,
                 proc: Path = PROC, clock: Callable[[], float] = time.time,
                 harness_root: int | None = None, rescan_s: float = 5.0):
        self.groups = groups
        self.every_s = every_s
        self.proc = proc
        self.clock = clock
        self.harness_root, self.rescan_s = harness_root, rescan_s
        self._harness: list[int] = []
        self._scanned = -rescan_s
        self.cpus = os.cpu_count() or 1
        self.seconds: list[Second] = []
        self._last_t: float | None = None
        self._last_cpu: tuple[int, int, int, int, int] | None = None
        self._last: dict[int, tuple[float, float]] = {}  # pid -> its last (run, wait) ms
        self._niced_helpers: set[int] = set()  # "harness" processes at a positive nice
        self._niced_run = False  # a process of the named groups ran at a positive nice

    @property
    def available(self) -> bool:
        """Whether this host's kernel has what the meter reads."""
        return cpu_ticks(self.proc) is not None and task_times(os.getpid(), self.proc) is not None

    def start(self) -> None:
        """The readings the first Second counts from (processes already running count from here)."""
        self._last_t, self._last_cpu = self.clock(), cpu_ticks(self.proc)
        for group, pids in self._with_harness(self.groups()).items():
            for pid in pids:
                times = task_times(pid, self.proc)
                if times is not None:
                    self._last[pid] = times
                    self._note_nice(pid, group)

    def due(self) -> bool:
        """Whether `sample()` would take a Second now."""
        return self._last_t is None or self.clock() - self._last_t >= self.every_s

    def sample(self, groups: Mapping[str, list[int]] | None = None) -> Second | None:
        """A Second since the last sample, if `every_s` has passed (None otherwise). `groups`:
        `groups()` read already (by the thread that owns what it reads), for a sample taken in
        another thread."""
        now = self.clock()
        if self._last_t is None:
            self.start()
            return None
        if now - self._last_t < self.every_s:
            return None
        cpu = cpu_ticks(self.proc)
        steal = busy = irq = niced = 0.0
        if cpu is not None and self._last_cpu is not None:
            total = max(cpu[0] - self._last_cpu[0], 1)
            steal = (cpu[2] - self._last_cpu[2]) / total
            busy = 1.0 - (cpu[1] - self._last_cpu[1]) / total
            irq = (cpu[3] - self._last_cpu[3]) / total
            niced = (cpu[4] - self._last_cpu[4]) / total
        run: dict[str, float] = {}
        wait: dict[str, float] = {}
        procs: dict[str, int] = {}
        helpers_ms = 0.0
        for group, pids in self._with_harness(self.groups() if groups is None else groups).items():
            for pid in pids:
                times = task_times(pid, self.proc)
                if times is None:
                    continue
                if pid not in self._last:
                    self._note_nice(pid, group)
                before = self._last.get(pid, (0.0, 0.0))  # new: from its start
                ran = max(0.0, times[0] - before[0])
                run[group] = run.get(group, 0.0) + ran
                if pid in self._niced_helpers:
                    helpers_ms += ran
                wait[group] = wait.get(group, 0.0) + max(0.0, times[1] - before[1])
                procs[group] = procs.get(group, 0) + 1
                self._last[pid] = times
        span = now - self._last_t
        if self._niced_run:
            niced = 0.0
        else:
            niced = max(0.0, niced - helpers_ms / (1000.0 * max(span, 1e-6) * self.cpus))
        second = Second(now, span, steal, busy, run, wait, self.cpus, irq, procs, niced_share=niced)
        self._last_t, self._last_cpu = now, cpu
        self.seconds.append(second)
        return second

    def _note_nice(self, pid: int, group: str) -> None:
        nice = process_nice(pid, self.proc)
        if nice is None or nice <= 0:
            return
        if group == "harness":
            self._niced_helpers.add(pid)
        else:
            self._niced_run = True  # niced work beside it may compete at its level: none yields

    def _with_harness(self, groups: Mapping[str, list[int]]) -> dict[str, list[int]]:
        if self.harness_root is None:
            return dict(groups)
        if time.monotonic() - self._scanned >= self.rescan_s:
            self._scanned, self._harness = time.monotonic(), descendants(self.harness_root, self.proc)
        named = {pid for pids in groups.values() for pid in pids}
        return {**groups, "harness": [pid for pid in self._harness if pid not in named]}

    def summary(self, since: float | None = None) -> dict[str, object]:
        """The Seconds (ending after `since`, epoch) summed: steal, busy and others' shares, and
        per group the ms run and waited."""
        chosen = [s for s in self.seconds if since is None or s.t > since]
        span = sum(s.seconds for s in chosen)
        if not chosen or span <= 0:
            return {"seconds": 0.0}

        def mean(attr: str) -> float:
            return sum(getattr(s, attr) * s.seconds for s in chosen) / span

        groups = sorted({g for s in chosen for g in s.run_ms})
        return {"seconds": round(span, 2), "cpus": self.cpus,
                "steal_share": round(mean("steal_share"), 4),
                "busy_share": round(mean("busy_share"), 4),
                "others_share": round(mean("others_share"), 4),
                "yielding_share": round(mean("yielding_share"), 4),
                "run_ms": {g: round(sum(s.run_ms.get(g, 0.0) for s in chosen), 1) for g in groups},
                "wait_ms": {g: round(sum(s.wait_ms.get(g, 0.0) for s in chosen), 1) for g in groups}}
