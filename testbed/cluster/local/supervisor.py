"""The lives of a LocalCluster's replica processes: started, watched until ready and until they
exit, stopped gracefully, and all stopped at close."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from testbed.cluster.local.client import ReplicaClient
from testbed.cluster.local.events import EventLog, log
from testbed.cluster.local.interference import InterferenceTuner
from testbed.cluster.local.launch import ReplicaLauncher
from testbed.cluster.local.placement import GpuPlacement
from testbed.cluster.local.replicas import ReplicaProcess, ReplicaTable
from testbed.cluster.local.rotation import BalancerRotation

READY_POLL_S = 0.01  # how often a starting replica that cannot answer yet is asked again

ReplicaHook = Callable[[ReplicaProcess], None]


@dataclass(frozen=True)
class SupervisorHooks:
    """What the cluster's policy hears from a `ReplicaSupervisor`: each replica that became
    ready (`on_ready`) or died (`on_died`), and every change (`notify`)."""

    on_ready: ReplicaHook
    on_died: ReplicaHook
    notify: Callable[[], None]


@dataclass(frozen=True)
class GpuSharing:
    """How replicas share the GPUs: which one a new replica goes on (`placement`) and how much
    its neighbours there slow it (`tuner`)."""

    placement: GpuPlacement
    tuner: InterferenceTuner


class ReplicaSupervisor:
    """Runs one task per replica: start its process on the GPU placement picks, poll it until
    ready (then into rotation), wait for its exit (out of rotation). The cluster's policy hears
    of each replica that became ready (`on_ready`) or died (`on_died`), and `notify` of every
    change. `async with` or `aclose` (safe twice) stops them all."""

    def __init__(self, table: ReplicaTable, gpus: GpuSharing, rotation: BalancerRotation,
                 client: ReplicaClient, launcher: ReplicaLauncher, events: EventLog, *,
                 seed: int, hooks: SupervisorHooks) -> None:
        self._table = table
        self._placement = gpus.placement
        self._tuner = gpus.tuner
        self._rotation = rotation
        self._client = client
        self._launcher = launcher
        self._events = events
        self._seed = seed
        self._on_ready = hooks.on_ready
        self._on_died = hooks.on_died
        self._notify = hooks.notify
        self._counter = itertools.count(1)  # numbers replicas' names and, after, their seeds
        self._closed = False
        self._terminating: set[asyncio.Task[None]] = set()  # stopped, SIGTERM when answered

    async def __aenter__(self) -> ReplicaSupervisor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self, grace_s: float = 10.0) -> None:
        """Stop every replica gracefully, SIGKILL those still running after `grace_s`."""
        if self._closed:
            return
        self._closed = True
        everyone = self._table.live()
        for r in everyone:
            self.stop(r)
        tasks = [r.task for r in everyone if r.task is not None]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace_s)
            for r in everyone:
                if r.proc is not None and r.proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        r.proc.kill()
            if pending:
                await asyncio.wait(pending, timeout=2.0)
        for waiting in list(self._terminating):  # their replicas are gone by now
            waiting.cancel()

    def spawn(self, service: str, replaces: str | None = None, *, warm: bool = False) -> None:
        """A new replica of the service, at the service's share, started in the background
        (`warm`: ready once its server listens, without its profile's startup)."""
        share = self._table.share[service]
        r = ReplicaProcess(service, f"{service}-{next(self._counter)}",
                           gpu=self._placement.place(service, share), share=share, warm=warm)
        self._table.by_service[service].append(r)
        r.task = asyncio.get_running_loop().create_task(self._run(r, replaces))

    def stop(self, r: ReplicaProcess) -> None:
        """Out of rotation first, then SIGTERM once the balancer's requests to it are answered: the
        replica finishes what it admitted and exits. (Signalled at once, a request the balancer
        had sent but the replica had not yet read got a 503.)"""
        if not r.active:
            return
        r.state = "draining"
        self._rotation.take_out(r)
        self._events.replica(r, "draining")
        if r.proc is not None and r.proc.returncode is None:
            if self._rotation.forwarding(r):
                task = asyncio.get_running_loop().create_task(self._terminate_when_answered(r))
                self._terminating.add(task)
                task.add_done_callback(self._terminating.discard)
            else:
                _terminate(r)
        elif r.proc is None and r.task is not None:
            r.task.cancel()  # not even started: nothing to drain
            r.state = "stopped"

    async def _terminate_when_answered(self, r: ReplicaProcess) -> None:
        await self._rotation.forwards_answered(r)
        _terminate(r)

    async def _run(self, r: ReplicaProcess, replaces: str | None) -> None:
        batch = self._table.batch[r.service]
        seed = self._seed + next(self._counter)
        r.stretch = self._tuner.stretch_of(r)
        args = self._launcher.command(r, batch, seed)
        r.told = (batch, r.stretch)
        stderr = self._launcher.log_for(r)
        try:
            r.proc = await self._launcher.start(args, stderr)
            self._events.replica(
                r,
                "replaced" if replaces else "started",
                f"pid {r.proc.pid}" + (f", replaces {replaces}" if replaces else ""),
            )
            assert r.proc.stdout is not None
            line = await asyncio.wait_for(r.proc.stdout.readline(), 30.0)
            if not line.startswith(b"LISTENING "):
                raise RuntimeError(f"unexpected first line {line[:80]!r}")
            r.url = f"http://{self._launcher.connect_host}:{int(line.split()[1])}"
            watcher = asyncio.create_task(r.proc.wait())
            await self._await_ready(r, watcher)
            await watcher
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # failed to start: record, and free its units
            self._events.replica(r, "failed_to_start", str(exc))
            if r.proc is not None and r.proc.returncode is None:
                r.proc.kill()
                await r.proc.wait()
            r.state = "died"
            self._notify()
            return
        self._exited(r)

    async def _await_ready(self, r: ReplicaProcess, watcher: asyncio.Task[int]) -> None:
        while r.state == "starting" and not watcher.done():
            wait = await self._client.ready_in(r.url)
            if wait == 0.0:
                r.state = "ready"
                r.ready_after_s = time.monotonic() - r.started
                self._rotation.add(r)
                self._events.replica(r, "ready", f"after {r.ready_after_s:.2f} s")
                self._on_ready(r)
                self._notify()
                return
            # until the moment it says it will be ready; while it cannot answer yet (its
            # interpreter starting), again soon: a poll refused costs little
            await asyncio.wait({watcher}, timeout=READY_POLL_S if wait is None else wait)

    def _exited(self, r: ReplicaProcess) -> None:
        code = r.proc.returncode if r.proc else None
        self._rotation.take_out(r)
        if r.state == "draining":
            r.state = "stopped"
            self._events.replica(r, "stopped", f"exit {code}")
        else:
            r.state = "died"
            killed = " (SIGKILL)" if code == -signal.SIGKILL else ""
            self._events.replica(r, "died", f"exit {code}{killed}")
            log.warning("%s died (exit %s)", r.name, code)
            self._on_died(r)
        self._table.prune(r.service)
        self._notify()


def _terminate(r: ReplicaProcess) -> None:
    if r.proc is not None and r.proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            r.proc.send_signal(signal.SIGTERM)
