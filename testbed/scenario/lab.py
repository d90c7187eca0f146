"""The lab profile for the scenario runner: a lab that `testbed up --profile lab` brought up.

Per run, every service of the scenario needs a lab container (its profile's `deploy:`): its
manifest is generated into RUN_DIR/manifests/<service>/k8s.yaml (what `testbed up --profile lab`
applies), and a service without one stops the run before anything touches the lab. Then
`LabSession.open()` checks the inventory, the API server, Prometheus and the PDU sessions before
any cell starts. Per cell: the cell's slice shaping on the core host, the
Deployments scaled to the cell's replicas (others to 0) and waited for, then the runner's cell
code with `KubernetesCluster`, `PrometheusMetrics` (this cell's services) and `LabTraffic`
(clients and iperf3 on the UE hosts); afterwards every unit the cell started is stopped. The
run's end restores the replicas and the shaping it found. With `check`, the same code path runs
against `testbed.lab.plan`'s stand-ins on a virtual clock and prints each action instead: a plan,
kept as RUN_DIR/plan.txt, whose cells claim nothing (the runner marks the directory a plan).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from testbed.cluster.kubernetes import (
    GPU_RESOURCE,
    IMGCLS_MODE_ENV,
)
from testbed.cluster.manifest import check_deployable, origins, write_manifests
from testbed.errors import ConfigError, ConfigProblem
from testbed.lab.plan import ActionLog, PlanBackends, VirtualTime
from testbed.lab.session import DEFAULT_NAMESPACE, LabConfig, LabService, LabSession
from testbed.scenario.backends import CellBackends, CellJob, CellMain, CellOutcome, Clock
from testbed.scenario.profiles import scenario_profiles
from testbed.scenario.spec import Scenario

LAB_SAMPLE_S = 5.0  # scenario seconds between samples: each is ~10 PromQL queries per service
LAB_POLL_S = 2.0  # first-request poll


@dataclass
class LabOptions:
    """How a scenario runs on the lab: its inventory, kubeconfig, Prometheus URL and namespace, and
    whether to plan (`check`) instead of run, printing each action through `emit`."""
    inventory: Path
    kubeconfig: Path | None = None
    prometheus: str | None = None
    namespace: str = DEFAULT_NAMESPACE
    check: bool = False
    emit: Callable[[str], None] = print  # check mode's action lines


class LabProfile:
    """The lab as a scenario's profile: one LabSession for the run, opened and checked before the
    first cell (see the module's docstring)."""
    name = "lab"

    def __init__(self, options: LabOptions, scenario: Scenario, testbed: Any, base_dir: Path,
                 run_dir: Path, *, session: LabSession | None = None, clock: Any = None):
        self.options = options
        self.scenario = scenario
        self.run_dir = run_dir
        self.plan = options.check  # a plan, not a run: cells are `planned`, none lost or failed
        if scenario.time_scale != 1:
            raise ConfigError([ConfigProblem("<scenario>", None, "time_scale",
                                             f"the lab runs in real time (time_scale 1), not "
                                             f"{scenario.time_scale:g}: real replicas do not speed up")])
        if scenario.replica_work != "real":
            raise ConfigError([ConfigProblem("<scenario>", None, "replica_work",
                                             "the lab runs the real services (replica_work: real), "
                                             f"not {scenario.replica_work!r}")])
        services, manifests = self._services(scenario, base_dir, run_dir, options.namespace)
        config = LabConfig(options.inventory, options.kubeconfig, options.prometheus,
                           options.namespace)
        self.log: ActionLog | None = None
        if session is None:
            backends = None  # the lab itself
            if options.check:  # the same session, its clients printing what they would do
                vt = VirtualTime()
                self.log = ActionLog(options.emit, clock=vt.elapsed)
                backends = PlanBackends(self.log, vt, testbed, {s.name: 0 for s in services})
                clock = vt
            session = LabSession(config, services, testbed, run_dir, run_dir.name,
                                 total_units=scenario.total_units, backends=backends)
        self.session = session
        self.clock = clock or Clock()
        groups = [c.ue_group for c in scenario.clients]
        groups += [g.name for g in testbed.ue_groups
                   if g.slice in {x.slice for x in scenario.cross_traffic}]
        try:
            session.open(groups)
        except BaseException:
            session.close()
            raise
        if self.log:  # what `testbed up --profile lab` applies for these services
            for svc in services:
                self.log(_planned_manifest(svc, manifests[svc.name], options.namespace))

    @staticmethod
    def _services(scn: Scenario, base_dir: Path, run_dir: Path, namespace: str
                  ) -> tuple[list[LabService], dict[str, Path]]:
        """The scenario's services as the lab sees them, and the manifest generated for each from
        its profile's `deploy:` (a ConfigError naming `services.<name>.deploy` and the profile
        file for a service without one, before anything touches the lab)."""
        profiles_file = base_dir / scn.service_profiles if scn.service_profiles else None
        profiles = scenario_profiles(scn, base_dir)
        chosen = [profiles[s.name] for s in scn.services]
        where = origins([p.name for p in chosen], profiles_file)
        check_deployable(chosen, where)
        paths = write_manifests(chosen, run_dir / "manifests", namespace, where=where)
        manifests = {p.name: path for p, path in zip(chosen, paths, strict=True)}
        # the scenario's own profiles: the SLO its results are judged by (testbed.scenario.results)
        return [LabService(p.name, p.slo_ms, p.capacity, p.units, str(manifests[p.name]),
                           p.deploy.image if p.deploy else "", p.deploy.port if p.deploy else 0,
                           bool(p.deploy and p.deploy.gpu), p.initial_replicas,
                           dict(p.deploy.env) if p.deploy else {})
                for p in chosen], manifests

    def run_cell(self, job: CellJob, main: CellMain) -> CellOutcome:
        """Shape the cell's slices, scale its Deployments, run `main` with the lab's backends, and stop
        what it started. job: the cell's repetition; main: the runner's cell."""
        s = self.session
        replicas = {x.name: x.replicas for x in job.scn.services}
        outcome = job.outcome
        outcome.planned = self.plan
        outcome.info["lab"] = {"inventory": str(s.inventory.path), "namespace": s.config.namespace,
                               "sessions": [vars(u) for u in s.sessions],
                               "server_modes": server_modes(s.services)}
        if self.log:
            self.log(f"── cell {job.cell.label or job.cell.slug}, rep {job.rep} ──")
        traffic = s.traffic(f"{job.cell.slug}-rep-{job.rep}")
        try:
            s.apply_shaping(job.cell.testbed)
            s.scale_for_cell(replicas)
            assert s.metrics is not None and s.cluster is not None
            metrics = s.metrics.for_services(replicas, reading=job.scn.measure,
                                             running=s.cluster.running_pods)
            if job.scn.measure != "harness":
                metrics.check_series()
            asyncio.run(main(CellBackends(
                cluster=s.cluster, metrics=metrics, traffic=traffic,
                wait_ready=lambda timeout_s: s.wait_ready(replicas, timeout_s),
                clock=self.clock, sample_every_s=LAB_SAMPLE_S, poll_s=LAB_POLL_S,
                wait_first_request=self.log is None)))
        finally:
            for p in traffic.close():
                outcome.problem(p)
            if self.log:
                self.log.flush()
        return outcome

    def __enter__(self) -> LabProfile:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> list[str]:
        """Restore what the run changed on the lab; a second call finds nothing left to undo."""
        problems = self.session.close()
        if self.log:
            self.log.flush()
            (self.run_dir / "plan.txt").write_text("\n".join(self.log.lines) + "\n")
        return problems


def server_modes(services: list[LabService]) -> dict[str, str]:
    """The server mode each of `services`' pods run, where its server has modes: the imgcls
    server's TESTBED_IMGCLS_MODE from the manifest's environment (overlap, its default, when unset)."""
    return {s.name: s.env.get(IMGCLS_MODE_ENV, "overlap (the server's default)")
            for s in services if IMGCLS_MODE_ENV in s.env or s.image.startswith("testbed/imgcls")}


def _planned_manifest(s: LabService, path: Path, namespace: str) -> str:
    gpu = f"{s.units} {GPU_RESOURCE} per pod" if s.gpu else "no GPU"
    return (f"manifest {path}: Deployment {namespace}/{s.name} ({s.image}, port {s.port}, {gpu}, "
            f"{s.initial_replicas} replica{'s' if s.initial_replicas != 1 else ''}) and NodePort "
            f"Service {namespace}/{s.name}, from its profile's deploy: (`testbed up --profile lab` "
            "applies it)")
