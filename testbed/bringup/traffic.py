"""The local profile's `TrafficBackend`: `testbed load` clients in UE namespaces, iperf3 sessions.

Clients run as `testbed load` processes inside their UE group's namespace (`ip netns exec`) and
stream records straight into the cell directory, so Ctrl-C keeps them; iperf3 pairs run between
a UE of the slice and the data network. `stop()` is safe to call twice, and leaving an
`async with LocalTraffic(...)` block calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from testbed import plugins
from testbed.errors import TestbedError
from testbed.load.traffic import ClientJob, IperfJob
from testbed.net.cmd import die_with_parent
from testbed.net.iperf import IperfSession

# The clients stand for users' devices, which do not share a CPU with the cluster: here they do,
# and a client woken at a request's time behind a replica or the balancer sends it late. At a
# time scale every millisecond late is that many times more of scenario time, on every request.
# Ten nice levels ahead of the cell they preempt it when due (time scale 16 on the busiest window:
# imgcls's p99 lateness 45 -> 36 ms, bound 50; docs/pace.md). They use about a fifth of what the
# cell does, so the cell is not starved.
CLIENT_PRIORITY_AHEAD = 10


def ahead_of_the_cell(pid: int) -> None:
    """Run process `pid` CLIENT_PRIORITY_AHEAD nice levels ahead of this one, where allowed (root);
    a no-op elsewhere."""
    if os.geteuid() != 0:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.setpriority(os.PRIO_PROCESS, pid,
                       max(-20, os.getpriority(os.PRIO_PROCESS, 0) - CLIENT_PRIORITY_AHEAD))


class LocalTraffic:
    """Clients and iperf3 of one cell on a local testbed's topology."""

    def __init__(self, topology: Any, log_dir: Path):
        self.topology = topology
        self.log_dir = log_dir
        self._procs: list[tuple[ClientJob, asyncio.subprocess.Process]] = []
        self._sessions: list[tuple[IperfJob, IperfSession]] = []

    async def start_iperf(self, jobs: Sequence[IperfJob]) -> list[str]:
        return await asyncio.to_thread(self._start_iperf, jobs)

    def _start_iperf(self, jobs: Sequence[IperfJob]) -> list[str]:
        problems = []
        for job in jobs:
            try:
                self._sessions.append((job, IperfSession.start(
                    self.topology, job.slice, flows=job.flows, duration=job.duration_s,
                    reverse=job.reverse, ue_index=job.ue_index)))
            except TestbedError as exc:
                problems.append(f"iperf3 in slice {job.slice} did not start: {exc}")
        return problems

    async def start_clients(self, jobs: Sequence[ClientJob]) -> list[str]:
        for job in jobs:
            ues = self.topology.ues_of_group(job.ue_group)
            ue = ues[0]  # a group's UEs share its namespace: its load leaves from each in turn
            argv = [sys.executable, "-m", "testbed", "load", *job.load_argv(
                out=str(job.out), slice=ue.slice, sources=[str(u.address) for u in ues],
                ue_group=ue.group,
                trace=str(job.trace) if job.trace is not None else None,
                profiles=str(job.profiles) if job.profiles is not None else None)]
            log = (self.log_dir / f"client-{job.index}.log").open("wb")
            self._procs.append((job, await asyncio.create_subprocess_exec(
                "ip", "netns", "exec", ue.host.name, *argv, stdout=log, stderr=log,
                env=plugins.child_env(),  # a service's own client is imported where the harness's was
                start_new_session=True, preexec_fn=die_with_parent())))  # no orphans after SIGKILL
            log.close()
            ahead_of_the_cell(self._procs[-1][1].pid)
        return []

    def clients_running(self) -> bool:
        return any(p.returncode is None for _, p in self._procs)

    def pids(self) -> dict[str, list[int]]:
        """The process ids of the running clients and iperf3 (what `testbed.metrics.host` meters)."""
        return {"clients": [p.pid for _, p in self._procs if p.returncode is None],
                "iperf3": [pid for _, s in self._sessions for pid in s.pids()]}

    async def __aenter__(self) -> LocalTraffic:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    async def stop(self) -> list[str]:
        problems = await self._stop_clients()
        problems += await asyncio.to_thread(self._finish_iperf)
        return problems

    async def _stop_clients(self) -> list[str]:
        problems = []
        procs, self._procs = self._procs, []
        for _, p in procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGINT)  # clients flush their records on SIGINT
        for job, p in procs:
            try:
                rc = await asyncio.wait_for(p.wait(), 10)
            except (TimeoutError, asyncio.TimeoutError):
                p.kill()
                rc = await p.wait()
            if rc not in (0, -signal.SIGINT, 130):
                problems.append(f"client {job.index} exited with {rc} "
                                f"(see logs/client-{job.index}.log)")
        return problems

    def _finish_iperf(self) -> list[str]:
        problems = []
        sessions, self._sessions = self._sessions, []
        for job, session in sessions:
            try:
                result = session.wait(timeout=30)
            except TestbedError as exc:
                problems.append(f"iperf3 in slice {job.slice} failed: {exc}")
                continue
            finally:
                session.stop()
            job.out.write_text(json.dumps(result.raw))
        return problems
