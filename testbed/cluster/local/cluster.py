"""The local profile's cluster: emulated replicas as processes (one per replica) behind the
in-process load balancer, sharing a pool of resource units; implements ClusterBackend."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from testbed.cluster.base import ServiceTarget
from testbed.cluster.local.client import ReplicaClient
from testbed.cluster.local.config import LocalClusterConfig
from testbed.cluster.local.events import ClusterEvent, EventLog
from testbed.cluster.local.interference import InterferenceTuner
from testbed.cluster.local.launch import ReplicaLauncher
from testbed.cluster.local.placement import GpuPlacement
from testbed.cluster.local.replicas import ReplicaProcess, ReplicaTable
from testbed.cluster.local.rotation import BalancerRotation
from testbed.cluster.local.supervisor import GpuSharing, ReplicaSupervisor, SupervisorHooks
from testbed.errors import ConfigError, ConfigProblem, StateError
from testbed.metrics.balancer import BalancerAddress, LoadBalancer
from testbed.metrics.window import WindowMetrics

__all__ = ["ClusterEvent", "LocalCluster", "ReplicaProcess"]  # ClusterEvent's old import path


class LocalCluster:
    """`async with LocalCluster(LocalClusterConfig(initial={service: 1})) as cluster:` — replicas
    of the emulated services, scaled by `scale()`, reached through `endpoint(service)`.

    One LocalClusterConfig says what runs and where (testbed.cluster.local.config); each part
    takes what it needs of it. The scaling policy lives here (how many replicas, which stop, which
    replace the dead); the pieces it composes do the rest: ReplicaSupervisor the processes,
    GpuPlacement the GPUs, InterferenceTuner the stretches and batches, BalancerRotation the load
    balancer's rotation. `on_event` hears every replica event.
    """

    def __init__(self, config: LocalClusterConfig | None = None, *,
                 on_event: Callable[[ClusterEvent], None] | None = None):
        config = config or LocalClusterConfig()
        self.config = config
        self.profiles = config.profiles
        names = config.names
        self._names = names
        self._initial = {s: config.initial_replicas(s) for s in names}
        self.clock = config.clock
        self.replace_dead = config.replace_dead
        self._closing = False
        self._change = asyncio.Event()
        self.lb = LoadBalancer(
            self.profiles,
            names,
            address=BalancerAddress(config.host, config.advertise_host),
            ports=config.ports,
            metrics_port=config.metrics_port,
            sample_interval_s=self.clock.wall(1.0),
            clock=self.clock,
        )
        token = secrets.token_urlsafe(32)  # replicas' /_config; in their environment only
        self._table = ReplicaTable(names)
        self._events = EventLog(on_event)
        self._client = ReplicaClient(token)
        self._rotation = BalancerRotation(self.lb, self._table, self._events)
        self._placement = GpuPlacement(config.total_units, self._table, self.profiles)
        self._tuner = InterferenceTuner(self._table, self.profiles, config.interference,
                                        self._client, self._events)
        self._launcher = ReplicaLauncher(self.profiles, token, clock=self.clock,
                                         replica_host=config.replica_host,
                                         use_espeak=config.use_espeak,
                                         log_dir=Path(config.log_dir) if config.log_dir else None,
                                         sleep_only=config.sleep_only)
        self._supervisor = ReplicaSupervisor(
            self._table, GpuSharing(self._placement, self._tuner), self._rotation, self._client,
            self._launcher, self._events, seed=config.seed,
            hooks=SupervisorHooks(on_ready=self._retire_replaced, on_died=self._replace_dead,
                                  notify=self._notify))

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
                self.scale(s, self._initial[s], warm=self.config.initial_warm)
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self, grace_s: float = 10.0) -> None:
        """Stop every replica gracefully (SIGKILL after `grace_s`), then the load balancer. Safe twice."""
        if self._closing:
            return
        self._closing = True
        await self._supervisor.aclose(grace_s)
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

    def endpoint(self, service: str) -> str:
        return self.lb.endpoint(self._check(service))

    def scale(self, service: str, replicas: int, *, warm: bool = False) -> None:
        """Start or gracefully stop replicas so that `replicas` are wanted. A replica holds its
        units until its process has exited, so a scale-up right after a scale-down may not fit.
        `warm` replicas started here skip their profile's startup (the cluster's initial ones)."""
        self._check(service)
        if self._closing:
            raise StateError("the cluster is shutting down")
        if replicas < 0:
            raise StateError(f"replicas must be >= 0, got {replicas}")
        active = [r for r in self._table.active(service) if not r.retiring]
        extra = replicas - len(active)
        if extra > 0:
            self._check_room(service, replicas, extra)
        self._table.desired[service] = replicas
        for _ in range(max(0, extra)):
            self._supervisor.spawn(service, warm=warm)
        if extra < 0:
            # Newest first, and not-yet-ready ones before ready ones (they serve nobody yet).
            victims = [r for r in reversed(active) if r.state == "starting"] + [
                r for r in reversed(active) if r.state == "ready"
            ]
            for r in victims[:-extra]:
                self._supervisor.stop(r)
        self._notify()

    def _check_room(self, service: str, replicas: int, extra: int) -> None:
        """StateError unless `extra` more replicas of the service fit."""
        share = self._table.share[service]
        need = extra * self.units_per_replica(service)
        if share != 25.0 and self._placement.fits(share, extra) < extra:
            raise StateError(f"scaling {service} to {replicas} replicas of {share:g} % "
                             f"does not fit the GPUs' free share {self.gpu_free_pct()}")
        if share == 25.0 and need > self.free_units():
            raise StateError(
                f"scaling {service} to {replicas} needs {need} free resource units, "
                f"{self.free_units()} of {self.total_units()} are free"
            )

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
        # counted as scale() counts them: replicas retiring after a share change are not the
        # service's any more (they stop once the new ones are ready), though they hold their share
        active = [r for r in self._table.active(service) if not r.retiring]
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
                self._supervisor.spawn(service)
        self._notify()
        return ServiceTarget(fits, target.share_pct, target.batch)

    async def probe(self) -> list[dict[str, object]]:
        """What each ready replica reports (GET /healthz) beside what the cluster set for it:
        share, batch and interference stretch."""
        return await self._tuner.probe()

    # ---- beyond the protocol --------------------------------------------------------------------
    def window(self, seconds: float) -> dict[str, WindowMetrics]:
        """One WindowMetrics per service over the last `seconds` of scenario time."""
        return self.lb.window(seconds)

    @property
    def metrics_url(self) -> str:
        return self.lb.metrics_url

    def pids(self) -> dict[str, list[int]]:
        """The process ids of each service's live replicas (what `testbed.metrics.host` meters)."""
        out: dict[str, list[int]] = {}
        for r in self._table.every():
            if r.live and r.proc is not None and r.proc.returncode is None:
                out.setdefault(r.service, []).append(r.proc.pid)
        return out

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
                "time_scale": self.clock.scale,
                "lost_connections": self._rotation.lost_connections(),
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

    # ---- the supervisor's hooks ------------------------------------------------------------------
    def _retire_replaced(self, ready: ReplicaProcess) -> None:
        """Once every replica with the new share is ready, the ones it replaces stop."""
        reps = self._table.by_service[ready.service]
        new = [r for r in reps if r.active and not r.retiring]
        if new and all(r.state == "ready" for r in new):
            for r in reps:
                if r.retiring:
                    self._supervisor.stop(r)

    def _replace_dead(self, dead: ReplicaProcess) -> None:
        active = self._table.active(dead.service)
        if self.replace_dead and not self._closing and len(active) < self._table.desired[dead.service]:
            self._supervisor.spawn(dead.service, replaces=dead.name)

    def _notify(self) -> None:
        """A replica changed: stretches and batches follow, and wait_for re-checks."""
        self._tuner.refresh(tell=not self._closing)
        self._change.set()
        self._change = asyncio.Event()

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

    def _brief(self) -> str:
        return ", ".join(f"{s} {self.ready_replicas(s)}/{self._table.desired[s]}" for s in self._names)
