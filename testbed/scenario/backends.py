"""What the runner needs from a profile, and the local profile's answer.

A cell runs against three backends — a `ClusterBackend` (replicas, scale, free units,
endpoint), a `MetricsSource` (the window counts the scaler needs) and a `TrafficBackend` (clients
and iperf3 per UE group) — plus a clock. A `Profile` supplies them for one cell (a `CellJob`),
cleans up after it and returns what it found (a `CellOutcome`): `LocalProfile` brings a local
testbed up and down around each cell and runs the cell inside its data-network namespace; the
lab's profile (`testbed.scenario.lab`) connects to a lab that `testbed up --profile lab` brought up.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from testbed.bringup.local import LocalTestbed, sigint_deferred
from testbed.bringup.traffic import LocalTraffic
from testbed.clock import ScenarioClock
from testbed.cluster.base import ClusterBackend
from testbed.cluster.local import LocalCluster, LocalClusterConfig
from testbed.load.traffic import TrafficBackend
from testbed.metrics.agreement import Agreement, compare
from testbed.metrics.dashboard import answers as dashboard_answers
from testbed.metrics.prometheus import PrometheusMetrics, PromService
from testbed.metrics.server import PrometheusServer
from testbed.metrics.service_balancer import MESH_NAMESPACE
from testbed.metrics.source import BalancerMetrics, MetricsSource
from testbed.net.netns import NetnsLoop
from testbed.net.state import prometheus_dir, state_dir
from testbed.profiles import ServiceProfile
from testbed.scenario.matrix import Cell
from testbed.scenario.rundir import CellDir
from testbed.sim.measure import DEFAULT_MEASURE

if TYPE_CHECKING:
    from testbed.scenario.live import LiveView
    from testbed.scenario.spec import Scenario

# At a time scale a local cell's clients begin one schedule together: each says when it is ready
# (testbed.load.gate) and they begin this many seconds after the last. Each begun when ready
# (0.5-0.75 s after launch on a quiet 2-core machine, seconds on a busy one), imgcls's schedule
# began 0.25 s after the chatbot's, 4 s of scenario time at time scale 16; begun at a fixed 2 s
# after launch, a client slower than that beside the test suite began 40 ms late.
CLIENT_START_S = 0.1


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
    # at a time scale, the clients begin one schedule this many wall seconds after the last of
    # them is ready (`testbed load --start-gate`); None: each begins when it is ready and the
    # cell's clock at the first request (the lab, whose clients start over ssh)
    client_start_s: float | None = None
    wait_first_request: bool = True  # check mode has no requests to wait for
    # what each replica reports it runs (share, batch, interference stretch) beside what the
    # cluster set for it; the local cluster asks its replicas, the lab has no such probe
    probe: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None
    # the cell's process groups on this host (group -> pids: "clients", "iperf3", "runner",
    # "replicas:SERVICE"), metered each wall second (testbed.metrics.host); None: not on this host
    processes: Callable[[], dict[str, list[int]]] | None = None
    # where the scaler reads its period when that is another way than the samples' (`measure:
    # drafas`: Prometheus the DRAFAS way); None: `metrics`
    scaler_metrics: MetricsSource | None = None


def local_groups(cluster: Any, traffic: Any) -> dict[str, list[int]]:
    """The local cell's process groups: the runner (the balancer's event loop, the scaler), the
    clients, iperf3 and each service's replicas (its other processes, the testbed's samplers and
    a cell's Prometheus, are the meter's "harness": `testbed.metrics.host.HostMeter`).

    cluster: the cell's LocalCluster; traffic: its LocalTraffic."""
    groups = {"runner": [os.getpid()], **traffic.pids()}
    for service, pids in cluster.pids().items():
        groups[f"replicas:{service}"] = pids
    return groups


# the runner's cell: drives the backends; returns when its measured window began (epoch
# seconds), None when no load started
CellMain = Callable[[CellBackends], Awaitable["float | None"]]


@dataclass(frozen=True)
class CellJob:
    """One repetition of one cell, as the runner hands it to a profile: the cell, the repetition,
    its directory, the live view, the services' profiles, `event` (appends a row to the cell's
    events.jsonl as it happens) and the outcome the profile fills and returns (the runner reads
    it after an error or Ctrl-C too: the testbed a cell brought up is in it)."""
    cell: Cell
    rep: int
    dir: CellDir
    view: LiveView
    profiles: dict[str, ServiceProfile]
    event: Callable[[dict[str, Any]], None]
    outcome: CellOutcome

    @property
    def scn(self) -> Scenario:
        """The cell's scenario."""
        return self.cell.scenario


@dataclass
class CellOutcome:
    """What a profile found running a cell: facts for the cell's record (`info`: its testbed,
    Prometheus, the metrics' agreement, the lab's sessions), the problems it met (each one an
    event as it happens, through `log`), those of them that fail the cell (`failures`), and
    whether it was only planned (the lab's --check: no request was sent)."""
    log: Callable[[dict[str, Any]], None] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    planned: bool = False

    def problem(self, text: str) -> None:
        """Record `text` as a problem of the cell; the cell stays ok."""
        self.problems.append(text)
        if self.log is not None:
            self.log({"t": time.time(), "kind": "problem", "detail": text})

    def fail(self, text: str) -> None:
        """Record `text` as a problem that fails the cell (no check can pass on its rows)."""
        self.failures.append(text)
        self.problem(text)


class Profile(Protocol):
    """Where a scenario's cells run (local or lab): `run_cell` sets up each cell and returns what it
    found, `close` undoes what the whole run held."""
    name: str

    def run_cell(self, job: CellJob, main: CellMain) -> CellOutcome:
        """Prepare the cell's testbed, run `main` with its backends, undo what the cell started;
        returns what it found (`job.outcome`, filled as it goes).

        job: the cell's repetition; main: the runner's cell, run once on the backends."""
        ...

    def close(self) -> list[str]:
        """Undo what the profile holds for the whole run; returns what could not be undone."""
        ...


def scrape_drift_ms(clock: ScenarioClock, interval: str) -> float:
    """How far Prometheus's scrapes drift against the scenario's seconds, in ms per scenario
    second: its interval is whole wall milliseconds (`interval`, e.g. "62ms"), so at a time
    scale whose second is not (62.5 ms at 16) each scrape falls that much early.

    clock: the cell's scenario clock; interval: the scrape interval Prometheus was given."""
    scrape_scn_s = clock.scenario(float(interval.removesuffix("ms")) / 1000.0)
    return round(1000.0 * abs(1.0 - scrape_scn_s), 3)


def record_agreement(outcome: CellOutcome, checks: list[Agreement],
                     print_line: Callable[[str], None]) -> None:
    """The cell's comparison of its two metrics sources, per service: kept in its outcome's info
    (`metrics_agreement`), printed, and a service whose sources disagree beyond the bounds
    (`testbed.metrics.agreement`) fails the cell, in one line naming the metric, the two values
    and the bound.

    outcome: the cell's outcome; checks: each service's comparison (testbed.metrics.agreement);
    print_line: where the comparison is printed (the live view's log)."""
    outcome.info["metrics_agreement"] = [c.row() for c in checks]
    for c in checks:
        print_line(f"metrics {c.line()}")
        if not c.agrees:
            outcome.fail(f"metrics sources disagree on {c.service}: {'; '.join(c.misses)}")


class LocalProfile:
    """A fresh local testbed per cell; replicas as local processes; clients in UE namespaces."""

    name = "local"

    def run_cell(self, job: CellJob, main: CellMain) -> CellOutcome:
        """Bring up the cell's local testbed and cluster, run `main` with their backends, and take them
        down (on error and Ctrl-C too). job: the cell's repetition; main: the runner's cell."""
        # a fresh name per cell: runs never collide with a testbed the user has up
        name = "r" + secrets.token_hex(3)
        spec = job.cell.testbed.model_copy(update={"name": name})
        # the subscriber store holds every UE's K/OPc: kept beside the state file, not in the
        # run directory that users share, and removed by the testbed's down
        tb = LocalTestbed(spec, provision=True, store_dir=state_dir() / f"{name}.store",
                          clock=ScenarioClock(job.scn.time_scale), conditions_log=job.dir.conditions,
                          netstats_log=job.dir.net)
        # printed before anything is built: after a crash or SIGKILL, `down` needs this name
        job.view.log(f"cell {job.cell.index + 1} ({job.cell.label}), rep {job.rep + 1}: "
                     f"testbed {name} (if left behind: testbed down --name {name})")
        outcome = job.outcome
        try:
            tb.up()
            outcome.info["testbed"] = {"name": name, "namespaces": tb.topology.namespaces}
            outcome.info["provisioned"] = tb.provisioned
            cell = NetnsLoop(tb.topology.dn.name, lambda: self._cell(job, outcome, tb, main))
            cell.start()
            try:
                while not cell.join(0.25):
                    job.view.refresh()
            except KeyboardInterrupt:
                job.view.note("interrupted: stopping clients, keeping what was collected…")
                cell.cancel()
                with sigint_deferred():
                    cell.join()
                raise
            cell.result()
        finally:
            with sigint_deferred():
                tb.down()
        return outcome

    async def _cell(self, job: CellJob, outcome: CellOutcome, tb: Any, main: CellMain) -> None:
        scn = job.scn
        main_done = False  # replicas stopped by the cell's own shutdown are not failures

        def on_event(ev: Any) -> None:
            row = asdict(ev)
            job.event(row)
            if row.get("kind") in ("died", "failed_to_start") and not main_done:
                outcome.problem(f"replica {row.get('replica')} of {row.get('service')} "
                                f"{row.get('kind')}: {row.get('detail', '')}")

        config = LocalClusterConfig(
            profiles=job.profiles,
            services=[s.name for s in scn.services],
            initial={s.name: s.replicas for s in scn.services},
            total_units=scn.total_units,
            time_scale=scn.time_scale,
            host=str(tb.topology.dn_addr),
            log_dir=job.dir.logs,
            seed=scn.seed + job.rep,
            interference=scn.interference,
            sleep_only=scn.replica_work == "sleep",
            # the cell waits for its initial replicas before its load, as the DRAFAS testbed's
            # runs began with their deployments up: their startup (TTS's 21 s, 10.5 s of wall
            # time at time scale 2) was wall time spent on nothing. A replica the scaler adds pays it.
            initial_warm=True,
        )
        cluster = LocalCluster(config, on_event=on_event)
        # the traffic's clients and iperf3 sessions stop on the way out, whatever happened (the
        # cell stops them itself when it ends normally; stopping twice is a no-op)
        async with cluster, LocalTraffic(tb.topology, job.dir.logs) as traffic:
            backends = CellBackends(
                cluster=cluster, metrics=BalancerMetrics(cluster.lb),
                traffic=traffic,
                wait_ready=lambda timeout_s: cluster.wait_ready(timeout_s=timeout_s),
                clock=Clock(), probe=cluster.probe, client_start_s=CLIENT_START_S,
                processes=lambda: local_groups(cluster, traffic))
            try:
                if scn.metrics == "prometheus" or scn.measure != DEFAULT_MEASURE:
                    await self._with_prometheus(job, outcome, tb, cluster, backends, main)
                else:
                    await main(backends)
            finally:
                main_done = True

    async def _with_prometheus(self, job: CellJob, outcome: CellOutcome, tb: Any, cluster: Any,
                               backends: CellBackends, main: CellMain) -> None:
        """The cell reads a Prometheus server of its own (inside the data-network namespace, where
        `down` finds it after a crash) scraping the balancer's mesh series, as the lab reads its
        mesh; at the end both sources' counts of the measured span are compared. With a way of
        measuring other than the harness's (`measure: drafas`) the scaler reads its windows that
        way, its Running pods from the cluster, and the comparison reads the harness's way."""

        scn = job.scn
        scale = ScenarioClock(scn.time_scale)
        scrape_s = max(min(1.0, scale.wall(1.0)), 0.05)
        # the mesh's series from the balancer, and the slices' HTB counters (testbed.net.netstats)
        targets = [cluster.lb.metrics_url.removeprefix("http://"),
                   *([tb.netstats_target] if tb.netstats_target else [])]
        async with PrometheusServer(prometheus_dir(tb.name), targets,
                                    scrape_interval_s=scrape_s,
                                    log=job.dir.logs / "prometheus.log") as prom:
            outcome.info["prometheus"] = {"url": prom.url, "scrape_interval": prom.interval}
            metrics = PrometheusMetrics(
                prom.url, [PromService(s.name, scale.wall(job.profiles[s.name].slo_ms),
                                       job.profiles[s.name].capacity, MESH_NAMESPACE)
                           for s in scn.services],
                clock=scale, step_s=scrape_s)
            scaler = metrics
            if scn.measure != DEFAULT_MEASURE:
                scaler = metrics.for_services([s.name for s in scn.services], reading=scn.measure,
                                              running=lambda s: len(cluster.replicas(s)))
                outcome.info["prometheus"]["measure"] = scn.measure
                # the scrapes against the clients' seconds: the clients' own drift and any the
                # whole-ms interval adds (none at a time scale the cell plan chose)
                outcome.info["prometheus"]["drift_ms_per_s"] = round(
                    scrape_drift_ms(scale, prom.interval) + 1000.0 * scn.client_drift, 3)
            reading = replace(backends, scaler_metrics=scaler)
            if scn.metrics == "prometheus":  # the samples and the first request from it too
                reading = replace(reading, metrics=metrics, poll_s=scrape_s)
            # the per-second samples otherwise stay in process: at time scale 16 they would ask
            # Prometheus a few hundred queries a wall second, which took 40 % of a core
            started = await main(reading)
            if started is None or scn.metrics != "prometheus":
                return  # the sources compared where the scenario asks for Prometheus's metrics
            await asyncio.sleep(3 * scrape_s)  # the last counts scraped
            # both sides from a little before the first request (nothing came earlier) to now
            span = scale.scenario(time.time() - started + 2.0)
            local = backends.metrics.windows(span)
            at = time.time()
            # the span the balancer's whole intervals cover, so both divide by the same time
            remote = {s.name: await asyncio.to_thread(metrics.window, s.name, local[s.name].seconds,
                                                      end=at) for s in scn.services}
            record_agreement(outcome, [compare(local[s.name], remote[s.name]) for s in scn.services],
                             job.view.log)
            # the lab dashboard's queries against this cell's Prometheus: series each returned
            outcome.info["dashboard_queries"] = await asyncio.to_thread(dashboard_answers, prom.url)

    def close(self) -> list[str]:
        """Nothing is held across cells locally: returns no problems."""
        return []  # every cell brought its own testbed down
