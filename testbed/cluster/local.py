"""The local profile's cluster: emulated replicas as processes (one per replica) behind the
in-process load balancer, sharing a pool of resource units; implements ClusterBackend.

Replicas hold a share of an emulated GPU (four 25 % units to a GPU). With `interference=True`
each replica's processing time is stretched by InSS's interference term for the replicas beside
it on its GPU (`testbed.profiles.gpu_stretches`, the profile's curve the simulator uses too);
when neighbours come (ready) or go (exited), the cluster tells every ready replica its new
stretch, and its batch size, through the replica's token-guarded `POST /_config`."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import signal
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from testbed.cluster.base import ServiceTarget
from testbed.cluster.local_client import ReplicaClient
from testbed.cluster.local_events import ClusterEvent, EventLog, log
from testbed.cluster.local_interference import InterferenceTuner
from testbed.cluster.local_launch import ReplicaLauncher
from testbed.cluster.local_placement import GpuPlacement
from testbed.cluster.local_replicas import ReplicaProcess, ReplicaTable
from testbed.errors import ConfigError, ConfigProblem, StateError
from testbed.metrics.balancer import LoadBalancer
from testbed.metrics.window import WindowMetrics
from testbed.profiles import ServiceProfile, default_profiles

__all__ = ["ClusterEvent", "LocalCluster", "ReplicaProcess"]  # ClusterEvent's old import path


class LocalCluster:
    """`async with LocalCluster(initial={"chatbot": 1}) as cluster:` — replicas of the emulated
    services, scaled by `scale()`, reached through `endpoint(service)`.

    `time_scale` divides every profile time (processing, startup) and the sampling interval, so
    a scaler period of 30 s becomes 30/time_scale s of wall time.
    """

    def __init__(
        self,
        profiles: dict[str, ServiceProfile] | None = None,
        services: list[str] | None = None,
        initial: dict[str, int] | int = 1,
        total_units: int = 8,
        time_scale: float = 1.0,
        host: str = "127.0.0.1",
        ports: dict[str, int] | None = None,
        metrics_port: int = 0,
        replica_host: str = "127.0.0.1",
        advertise_host: str | None = None,
        replace_dead: bool = True,
        log_dir: str | Path | None = None,
        seed: int = 0,
        on_event: Callable[[ClusterEvent], None] | None = None,
        use_espeak: bool = True,
        interference: bool = False,
    ):
        self.profiles = profiles or default_profiles()
        names = services or list(self.profiles)
        unknown = [s for s in names if s not in self.profiles]
        if unknown:
            raise ConfigError(
                [ConfigProblem("services", None, s, "no profile for this service") for s in unknown]
            )
        if time_scale <= 0:
            raise ConfigError([ConfigProblem("cluster", None, "time_scale", "must be > 0")])
        self._names = names
        self._initial = {s: (initial if isinstance(initial, int) else initial.get(s, 1)) for s in names}
        self.time_scale = time_scale
        self.replace_dead = replace_dead
        token = secrets.token_urlsafe(32)  # replicas' /_config; in their environment only
        self._client = ReplicaClient(token)
        self._launcher = ReplicaLauncher(self.profiles, token, time_scale=time_scale,
                                         replica_host=replica_host, use_espeak=use_espeak,
                                         log_dir=Path(log_dir) if log_dir else None)
        self.seed = seed
        self._events = EventLog(on_event)
        self.lb = LoadBalancer(
            self.profiles,
            names,
            host=host,
            ports=ports,
            metrics_port=metrics_port,
            sample_interval_s=1.0 / time_scale,
            advertise_host=advertise_host,
            time_scale=time_scale,
        )
        for sb in self.lb.services.values():
            sb.on_failure = self._on_lb_failure
            sb.on_lost = self._on_lost_connection
        self._table = ReplicaTable(names)
        self._placement = GpuPlacement(total_units, self._table, self.profiles)
        self._tuner = InterferenceTuner(self._table, self.profiles, interference, self._client, self._events)
        self._counter = itertools.count(1)
        self._closing = False
        self._change = asyncio.Event()

    # ---- lifetime -------------------------------------------------------------------------
    async def __aenter__(self) -> LocalCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        needed = sum(self._initial[s] * self.profiles[s].units for s in self._names)
        if needed > self.total_units():
            raise StateError(
                f"initial replicas need {needed} resource units, the cluster has {self.total_units()}"
            )
        self._client.open()
        try:
            await self.lb.start()
            for s in self._names:
                self.scale(s, self._initial[s])
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self, grace_s: float = 10.0) -> None:
        """Stop every replica gracefully (SIGKILL after `grace_s`), then the load balancer. Safe twice."""
        if self._closing:
            return
        self._closing = True
        everyone = self._table.live()
        for r in everyone:
            self._stop(r)
        tasks = [r.task for r in everyone if r.task is not None]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace_s)
            for r in everyone:
                if r.proc is not None and r.proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        r.proc.kill()
            if pending:
                await asyncio.wait(pending, timeout=2.0)
        await self.lb.aclose()
        await self._client.aclose()
        self._launcher.close()

    @property
    def events(self) -> list[ClusterEvent]:
        return self._events.events

    @property
    def _http(self) -> aiohttp.ClientSession | None:
        """The session to the replicas (tests reach a replica directly through it)."""
        return self._client.session

    # ---- ClusterBackend ---------------------------------------------------------------------
    def services(self) -> list[str]:
        return list(self._names)

    def desired_replicas(self, service: str) -> int:
        return self._table.desired[self._check(service)]

    def ready_replicas(self, service: str) -> int:
        return self._table.ready_count(self._check(service))

    def units_per_replica(self, service: str) -> int:
        return self.profiles[self._check(service)].units

    def total_units(self) -> int:
        return self._placement.total_units

    def free_units(self) -> int:
        return self._placement.free_units()

    # ---- GpuClusterBackend -------------------------------------------------------------------------
    def target(self, service: str) -> ServiceTarget:
        active = self._table.active(self._check(service))
        return ServiceTarget(max(len(active), 1), self._table.share[service], self._table.batch[service],
                             tuple(r.gpu for r in active) if active else None)

    def gpu_free_pct(self) -> list[float]:
        return self._placement.gpu_free_pct()

    def share_used_pct(self, service: str) -> float:
        return sum(r.share for r in self._table.by_service[self._check(service)] if r.live)

    def configure(self, service: str, target: ServiceTarget) -> ServiceTarget:
        """Batch: told to every replica at once (POST /_config). Share: new replicas start beside
        the old ones, which stop once the new ones are ready. Applies as much as fits."""
        self._check(service)
        prof = self.profiles[service]
        if prof.gpu is None and (target.batch != 1 or target.share_pct != self._table.share[service]):
            raise ConfigError([ConfigProblem("services", None, f"{service}.gpu",
                                             "the profile has no gpu curve: only batch 1 at its own share")])
        self._table.batch[service] = target.batch  # ready replicas are told at the _notify() below
        if target.share_pct != self._table.share[service]:
            return self._reshare(service, target)
        active = self._table.active(service)
        fits = self._placement.fits(target.share_pct, target.replicas - len(active))
        with self._placement.preferring(service, list(target.gpus[len(active):]) if target.gpus else []):
            self.scale(service, len(active) + fits if target.replicas > len(active) else target.replicas)
        return self.target(service)

    def _reshare(self, service: str, target: ServiceTarget) -> ServiceTarget:
        """A new share: as many new replicas as fit start beside the old ones, which retire."""
        fits = self._placement.fits(target.share_pct, target.replicas)
        if fits == 0:
            self._notify()
            return self.target(service)
        self._table.share[service] = target.share_pct
        for r in self._table.active(service):
            r.retiring = True
        self._table.desired[service] = fits
        with self._placement.preferring(service, list(target.gpus) if target.gpus else []):
            for _ in range(fits):
                self._spawn(service)
        self._notify()
        return ServiceTarget(fits, target.share_pct, target.batch)

    async def probe(self) -> list[dict[str, object]]:
        """What each ready replica reports (GET /healthz) beside what the cluster set for it:
        share, batch and interference stretch."""
        return await self._tuner.probe()

    def endpoint(self, service: str) -> str:
        return self.lb.endpoint(self._check(service))

    def scale(self, service: str, replicas: int) -> None:
        """Start or gracefully stop replicas so that `replicas` are wanted. A replica holds its
        units until its process has exited, so a scale-up right after a scale-down may not fit."""
        self._check(service)
        if self._closing:
            raise StateError("the cluster is shutting down")
        if replicas < 0:
            raise StateError(f"replicas must be >= 0, got {replicas}")
        active = [r for r in self._table.active(service) if not r.retiring]
        extra = replicas - len(active)
        if extra > 0:
            need = extra * self.units_per_replica(service)
            share = self._table.share[service]
            if share != 25.0 and self._placement.fits(share, extra) < extra:
                raise StateError(f"scaling {service} to {replicas} replicas of {share:g} % "
                                 f"does not fit the GPUs' free share {self.gpu_free_pct()}")
            if share == 25.0 and need > self.free_units():
                raise StateError(
                    f"scaling {service} to {replicas} needs {need} free resource units, "
                    f"{self.free_units()} of {self.total_units()} are free"
                )
        self._table.desired[service] = replicas
        for _ in range(max(0, extra)):
            self._spawn(service)
        if extra < 0:
            # Newest first, and not-yet-ready ones before ready ones (they serve nobody yet).
            victims = [r for r in reversed(active) if r.state == "starting"] + [
                r for r in reversed(active) if r.state == "ready"
            ]
            for r in victims[:-extra]:
                self._stop(r)
        self._notify()

    # ---- beyond the protocol --------------------------------------------------------------------
    def window(self, seconds: float) -> dict[str, WindowMetrics]:
        """One WindowMetrics per service over the last `seconds` of scenario time."""
        return self.lb.window(seconds)

    @property
    def metrics_url(self) -> str:
        return self.lb.metrics_url

    def replicas(self, service: str) -> list[ReplicaProcess]:
        return [r for r in self._table.by_service[self._check(service)] if r.live]

    def status(self) -> dict[str, dict[str, object]]:
        return {
            s: {
                "desired": self._table.desired[s],
                "ready": self.ready_replicas(s),
                "replicas": {r.name: r.state for r in self._table.by_service[s] if r.live},
                "endpoint": self.lb.endpoint(s),
            }
            for s in self._names
        } | {
            "_cluster": {
                "total_units": self.total_units(),
                "free_units": self.free_units(),
                "metrics": self.lb.metrics_url,
                "time_scale": self.time_scale,
                "lost_connections": {s: sb.lost_connections for s, sb in self.lb.services.items()},
            }
        }

    async def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until every service has as many ready replicas as desired."""
        try:
            await self.wait_for(
                lambda: all(self.ready_replicas(s) == self._table.desired[s] for s in self._names), timeout_s
            )
        except (TimeoutError, asyncio.TimeoutError):
            raise StateError(f"replicas not ready after {timeout_s:.0f} s: {self._brief()}") from None

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        """Until `predicate()` holds, re-checked at every replica state change; TimeoutError after."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(self._change.wait(), left)

    # ---- replica processes -------------------------------------------------------------------------
    def _spawn(self, service: str, replaces: str | None = None) -> None:
        share = self._table.share[service]
        r = ReplicaProcess(service, f"{service}-{next(self._counter)}",
                           gpu=self._placement.place(service, share), share=share)
        self._table.by_service[service].append(r)
        r.task = asyncio.get_running_loop().create_task(self._run_replica(r, replaces))

    async def _run_replica(self, r: ReplicaProcess, replaces: str | None) -> None:
        batch = self._table.batch[r.service]
        seed = self.seed + next(self._counter)
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
            if await self._client.is_ready(r.url):
                r.state = "ready"
                r.ready_after_s = time.monotonic() - r.started
                self.lb.services[r.service].add(r.name, r.url)
                self._events.replica(r, "ready", f"after {r.ready_after_s:.2f} s")
                self._retire_replaced(r.service)
                self._notify()
                return
            await asyncio.wait({watcher}, timeout=0.05)

    def _retire_replaced(self, service: str) -> None:
        """Once every replica with the new share is ready, the ones it replaces stop."""
        new = [r for r in self._table.active(service) if not r.retiring]
        if new and all(r.state == "ready" for r in new):
            for r in self._table.by_service[service]:
                if r.retiring:
                    self._stop(r)

    def _exited(self, r: ReplicaProcess) -> None:
        code = r.proc.returncode if r.proc else None
        self.lb.services[r.service].take_out(r.name)
        if r.state == "draining":
            r.state = "stopped"
            self._events.replica(r, "stopped", f"exit {code}")
        else:
            r.state = "died"
            killed = " (SIGKILL)" if code == -signal.SIGKILL else ""
            self._events.replica(r, "died", f"exit {code}{killed}")
            log.warning("%s died (exit %s)", r.name, code)
            active = self._table.active(r.service)
            if self.replace_dead and not self._closing and len(active) < self._table.desired[r.service]:
                self._spawn(r.service, replaces=r.name)
        self._table.prune(r.service)
        self._notify()

    def _stop(self, r: ReplicaProcess) -> None:
        """Out of rotation first, then SIGTERM: the replica finishes what it admitted and exits."""
        if not r.active:
            return
        r.state = "draining"
        self.lb.services[r.service].take_out(r.name)
        self._events.replica(r, "draining")
        if r.proc is not None and r.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                r.proc.send_signal(signal.SIGTERM)
        elif r.proc is None and r.task is not None:
            r.task.cancel()  # not even started: nothing to drain
            r.state = "stopped"

    def _on_lb_failure(self, service: str, replica: str) -> None:
        # The balancer saw the connection fail; the process watcher confirms a death and replaces it.
        for r in self._table.by_service[service]:
            if r.name == replica:
                self._events.replica(r, "unreachable", "taken out of rotation by the load balancer")

    # ---- helpers -------------------------------------------------------------------------------
    def _check(self, service: str) -> str:
        if service not in self._table.by_service:
            raise ConfigError(
                [
                    ConfigProblem(
                        "services", None, service, f"unknown service (known: {', '.join(self._names)})"
                    )
                ]
            )
        return service

    def _on_lost_connection(self, service: str, when: str) -> None:
        """A client closed its connection (normal during a run): one event, no console output."""
        self._events.record(ClusterEvent(time.time(), service, "-", "connection_lost",
                                  f"client closed its connection {when}"))

    def _notify(self) -> None:
        self._tuner.refresh(tell=not self._closing)
        self._change.set()
        self._change = asyncio.Event()

    def _brief(self) -> str:
        return ", ".join(f"{s} {self.ready_replicas(s)}/{self._table.desired[s]}" for s in self._names)
