"""What the runner needs from a profile, and the local profile's answer.

A cell runs against three backends — a `ClusterBackend` (replicas, scale, free units,
endpoint), a `MetricsSource` (the window counts the scaler needs) and a `TrafficBackend` (clients
and iperf3 per UE group) — plus a clock. A `Profile` supplies them for one cell and cleans up
after it: `LocalProfile` brings a local testbed up and down around each cell and runs the cell
inside its data-network namespace; the lab's profile (`testbed.scenario.lab`) connects to a lab
that `testbed up --profile lab` brought up.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from testbed.bringup.local import LocalTestbed, sigint_deferred
from testbed.bringup.traffic import LocalTraffic
from testbed.cluster.base import ClusterBackend
from testbed.cluster.local import LocalCluster
from testbed.load.traffic import TrafficBackend
from testbed.metrics.agreement import Agreement, compare
from testbed.metrics.balancer import MESH_NAMESPACE
from testbed.metrics.prometheus import PrometheusMetrics, PromService
from testbed.metrics.server import PrometheusServer
from testbed.metrics.source import BalancerMetrics, MetricsSource
from testbed.net.netns import NetnsLoop
from testbed.net.state import prometheus_dir, state_dir

# The runner passes itself as `runner` (a `testbed.scenario.runner.CellRunner`): its cell, rep,
# dir, view, info, scn, closing, problem(), event() and profiles() are what a profile may use.
CellRunner = Any


class Clock:
    """Wall time; the lab's check mode swaps in a virtual clock that never waits."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (time.monotonic)."""
        return time.monotonic()

    def time(self) -> float:
        """Epoch seconds (time.time)."""
        return time.time()

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds`."""
        await asyncio.sleep(seconds)


@dataclass
class CellBackends:
    """What a cell runs on, from its profile: the cluster, the metrics source, the traffic backend,
    how to wait for the first replicas, the clock, and the sampling cadence."""
    cluster: ClusterBackend
    metrics: MetricsSource
    traffic: TrafficBackend
    wait_ready: Callable[[float], Awaitable[None]]  # timeout_s -> every initial replica ready
    clock: Clock
    sample_every_s: float = 1.0  # scenario seconds between samples
    poll_s: float = 0.02  # how often to look for the first request
    wait_first_request: bool = True  # check mode has no requests to wait for
    # what each replica reports it runs (share, batch, interference stretch) beside what the
    # cluster set for it; the local cluster asks its replicas, the lab has no such probe
    probe: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None


CellMain = Callable[[CellBackends], Awaitable[None]]


class Profile(Protocol):
    """Where a scenario's cells run (local or lab): `run_cell` sets up each cell, `close` undoes what
    the whole run held."""
    name: str

    def run_cell(self, runner: CellRunner, main: CellMain) -> None:
        """Prepare the cell's testbed, run `main` with its backends, undo what the cell started.

        runner: the cell's CellRunner."""
        ...

    def close(self) -> list[str]:
        """Undo what the profile holds for the whole run; returns what could not be undone."""
        ...


def record_agreement(runner: CellRunner, checks: list[Agreement]) -> None:
    """The cell's comparison of its two metrics sources, per service: kept in its info
    (`metrics_agreement`), printed, and a service whose sources disagree beyond the bounds
    (`testbed.metrics.agreement`) fails the cell, in one line naming the metric, the two values
    and the bound.

    runner: the cell's CellRunner; checks: each service's comparison (testbed.metrics.agreement)."""
    runner.info["metrics_agreement"] = [c.row() for c in checks]
    for c in checks:
        runner.view.log(f"metrics {c.line()}")
        if not c.agrees:
            runner.fail(f"metrics sources disagree on {c.service}: {'; '.join(c.misses)}")


class LocalProfile:
    """A fresh local testbed per cell; replicas as local processes; clients in UE namespaces."""

    name = "local"

    def run_cell(self, runner: CellRunner, main: CellMain) -> None:
        """Bring up the cell's local testbed and cluster, run `main` with their backends, and take them
        down (on error and Ctrl-C too). runner: the cell's CellRunner."""
        # a fresh name per cell: runs never collide with a testbed the user has up
        name = "r" + secrets.token_hex(3)
        spec = runner.cell.testbed.model_copy(update={"name": name})
        # the subscriber store holds every UE's K/OPc: kept beside the state file, not in the
        # run directory that users share, and removed by the testbed's down
        tb = LocalTestbed(spec, provision=True, store_dir=state_dir() / f"{name}.store")
        # printed before anything is built: after a crash or SIGKILL, `down` needs this name
        runner.view.log(f"cell {runner.cell.index + 1} ({runner.cell.label}), rep {runner.rep + 1}: "
                        f"testbed {name} (if left behind: testbed down --name {name})")
        try:
            tb.up()
            runner.info["testbed"] = {"name": name, "namespaces": tb.topology.namespaces}
            runner.info["provisioned"] = tb.provisioned
            job = NetnsLoop(tb.topology.dn.name, lambda: self._cell(runner, tb, main))
            job.start()
            try:
                while not job.join(0.25):
                    runner.view.refresh()
            except KeyboardInterrupt:
                runner.view.note("interrupted: stopping clients, keeping what was collected…")
                job.cancel()
                with sigint_deferred():
                    job.join()
                raise
            job.result()
        finally:
            with sigint_deferred():
                tb.down()

    async def _cell(self, runner: CellRunner, tb: Any, main: CellMain) -> None:
        scn = runner.scn

        def on_event(ev: Any) -> None:
            row = asdict(ev)
            runner.event(row)
            # replicas stopped by the cell's own shutdown are not failures
            if row.get("kind") in ("died", "failed_to_start") and not runner.closing:
                runner.problem(f"replica {row.get('replica')} of {row.get('service')} "
                               f"{row.get('kind')}: {row.get('detail', '')}")

        profiles = runner.profiles()
        cluster = LocalCluster(
            profiles=profiles, services=[s.name for s in scn.services],
            initial={s.name: s.replicas for s in scn.services},
            total_units=scn.total_units, time_scale=scn.time_scale,
            host=str(tb.topology.dn_addr), log_dir=runner.dir.logs, seed=scn.seed + runner.rep,
            on_event=on_event, interference=scn.interference,
            sleep_only=scn.replica_work == "sleep")
        # the traffic's clients and iperf3 sessions stop on the way out, whatever happened (the
        # cell stops them itself when it ends normally; stopping twice is a no-op)
        async with cluster, LocalTraffic(tb.topology, runner.dir.logs) as traffic:
            backends = CellBackends(
                cluster=cluster, metrics=BalancerMetrics(cluster.lb),
                traffic=traffic,
                wait_ready=lambda timeout_s: cluster.wait_ready(timeout_s=timeout_s),
                clock=Clock(), probe=cluster.probe)
            if scn.metrics == "prometheus":
                await self._with_prometheus(runner, tb, cluster, backends, main, profiles)
            else:
                await main(backends)

    async def _with_prometheus(self, runner: CellRunner, tb: Any, cluster: Any,
                               backends: CellBackends, main: CellMain,
                               profiles: dict[str, Any]) -> None:
        """The cell reads a Prometheus server of its own (inside the data-network namespace, where
        `down` finds it after a crash) scraping the balancer's mesh series, as the lab reads its
        mesh; at the end both sources' counts of the measured span are compared."""

        scn = runner.scn
        ts = scn.time_scale
        scrape_s = max(min(1.0, 1.0 / ts), 0.05)
        async with PrometheusServer(prometheus_dir(tb.name),
                                    [cluster.lb.metrics_url.removeprefix("http://")],
                                    scrape_interval_s=scrape_s,
                                    log=runner.dir.logs / "prometheus.log") as prom:
            runner.info["prometheus"] = {"url": prom.url, "scrape_interval": prom.interval}
            metrics = PrometheusMetrics(
                prom.url, [PromService(s.name, profiles[s.name].slo_ms / ts, profiles[s.name].capacity,
                                       MESH_NAMESPACE) for s in scn.services],
                time_scale=ts, step_s=scrape_s)
            await main(replace(backends, metrics=metrics, poll_s=scrape_s))
            started = runner.info.get("measure_started")
            if started is None:
                return
            await asyncio.sleep(3 * scrape_s)  # the last counts scraped
            # both sides from a little before the first request (nothing came earlier) to now
            span = (time.time() - started + 2.0) * ts
            local = backends.metrics.windows(span)
            at = time.time()
            # the span the balancer's whole intervals cover, so both divide by the same time
            remote = {s.name: await asyncio.to_thread(metrics.window, s.name, local[s.name].seconds,
                                                      end=at) for s in scn.services}
            record_agreement(runner, [compare(local[s.name], remote[s.name]) for s in scn.services])

    def close(self) -> list[str]:
        """Nothing is held across cells locally: returns no problems."""
        return []  # every cell brought its own testbed down
