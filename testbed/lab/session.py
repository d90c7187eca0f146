"""One scenario run's connections to a lab: inventory, Kubernetes, Prometheus, UE hosts.

`LabSession.open()` checks, before any cell starts, everything a cell will need and fails with one
line naming the host and what failed: the inventory has UE hosts, the API server answers and
every service's Deployment exists, Prometheus answers, and every UE group the scenario uses has
its PDU sessions. Per cell it applies the cell's slice shaping on the core host, scales the
Deployments to the cell's replicas (others to 0), and hands out a `LabTraffic`. `close()` stops
whatever the run started and puts the Deployments' replicas and the shaping back; it is safe to
call twice, and leaving a `with LabSession(...)` block calls it.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from testbed.clock import WALL_TIME, PollClock
from testbed.cluster.kubernetes import (
    DEFAULT_NAMESPACE,
    MPS_REPLICAS,
    KubernetesCluster,
    KubeService,
    mps_unit_pct,
)
from testbed.config import TestbedSpec
from testbed.errors import MissingRequirement, StateError
from testbed.lab.hosts import AnsibleHosts, HostRunner
from testbed.lab.inventory import LabInventory
from testbed.lab.shaping_script import shaping_script
from testbed.lab.traffic import LabTraffic, RunCell, UeSession, discover_sessions
from testbed.metrics.prometheus import PrometheusMetrics, PromService
from testbed.net.iperf import BASE_PORT
from testbed.paths import RUNS_DIR

SHAPING_SCRIPT = "/usr/local/sbin/tb-slice-shaping"  # the upf role's upf_shaping_script


@dataclass
class LabConfig:
    inventory: Path
    kubeconfig: Path | None = None  # default: $KUBECONFIG, else the newest runs/*-lab-up/kubeconfig
    prometheus: str | None = None  # default: http://<cluster_server>:<prometheus_node_port>
    namespace: str = DEFAULT_NAMESPACE


@dataclass(frozen=True)
class LabService:
    name: str
    slo_ms: float
    capacity: int
    units: int = 1
    manifest: str | None = None  # its manifest, generated from the profile's deploy:
    image: str = ""
    port: int = 0
    gpu: bool = True
    initial_replicas: int = 1
    env: dict[str, str] = field(default_factory=dict)  # its deploy: environment (the manifest's)


def default_kubeconfig(runs: Path = RUNS_DIR) -> Path | None:
    ups = sorted(runs.glob("*-lab-up/kubeconfig")) if runs.is_dir() else []
    return ups[-1] if ups else None


@dataclass(frozen=True)
class Reach:
    """Where a session's backends connect, as the inventory and the options name it."""

    inventory: LabInventory
    run_dir: Path
    kubeconfig: Path | None
    namespace: str
    node_address: str  # the services' NodePorts
    prometheus: str  # Prometheus's URL
    unit_pct: int  # the GPU share of one MPS unit
    max_units: int | None


class RealBackends:
    """The lab itself: commands through Ansible, the Kubernetes API, Prometheus over HTTP, real
    time. `testbed.lab.plan.PlanBackends` is check mode's stand-in; a session swaps only this."""

    clock: PollClock = WALL_TIME  # what the cell's traffic polls its clients on

    def hosts(self, reach: Reach) -> HostRunner:
        return AnsibleHosts(reach.inventory.path, reach.run_dir)

    def cluster(self, reach: Reach, services: list[KubeService]) -> KubernetesCluster:
        kubeconfig = reach.kubeconfig or default_kubeconfig()
        return KubernetesCluster.connect(
            services, reach.namespace, kubeconfig=str(kubeconfig) if kubeconfig else None,
            max_units=reach.max_units, node_address=reach.node_address, unit_pct=reach.unit_pct)

    def metrics(self, reach: Reach, services: list[PromService]) -> PrometheusMetrics:
        return PrometheusMetrics(reach.prometheus, services)


class LabSession:
    """One run's lab connections. `backends` makes them: `RealBackends()` (the default) or check
    mode's `PlanBackends`; everything else is the same code."""

    def __init__(self, config: LabConfig, services: Sequence[LabService], spec: TestbedSpec,
                 run_dir: Path, run_id: str, *, total_units: int | None = None,
                 backends: Any = None):
        self.config = config
        self.backends = backends or RealBackends()
        self.inventory = LabInventory.load(config.inventory)
        self.services = list(services)
        self.spec = spec
        self.run_dir = run_dir
        self.run_id = run_id
        self.total_units = total_units
        self.hosts: HostRunner | None = None
        self.cluster: KubernetesCluster | None = None
        self.metrics: PrometheusMetrics | None = None
        self._clock = self.backends.clock
        self.sessions: list[UeSession] = []
        self.iperf_servers: list[tuple[str, int]] = []
        self._original: dict[str, int] = {}
        self._shaping: str | None = None
        self._shaped = False
        self._traffic: list[LabTraffic] = []

    # --- open / close ----------------------------------------------------------------------

    def open(self, groups: Sequence[str]) -> None:
        inv = self.inventory
        ue_hosts = inv.ue_hosts()
        server = inv.one("cluster_server", "cluster server")
        core = inv.one("core", "core host")
        self.core_host = core
        self.n6 = inv.var(core, "upf_n6_interface")
        if not self.n6:
            raise MissingRequirement(f"{core}: upf_n6_interface is not set in {inv.path}")
        for host in inv.hosts("traffic"):
            addr = str(inv.var(host, "iperf3_address") or inv.address(host))
            self.iperf_servers += [(addr, int(p))
                                   for p in inv.var(host, "iperf3_ports", [BASE_PORT])]
        reach = Reach(inv, self.run_dir, self.config.kubeconfig, self.config.namespace,
                      inv.services_address(server),
                      self.config.prometheus or inv.prometheus_url(server),
                      mps_unit_pct(inv.var(server, "gpu_operator_mps_replicas", MPS_REPLICAS),
                                   str(inv.path)),
                      self.total_units)
        self.hosts = self.backends.hosts(reach)
        self.cluster = self.backends.cluster(
            reach, [KubeService(s.name, units_per_replica=s.units) for s in self.services])
        for s in self.services:  # reachable, and every Deployment exists
            try:
                self._original[s.name] = self.cluster.desired_replicas(s.name)
            except StateError as exc:
                if not str(exc).endswith("not found") or s.manifest is None:
                    raise
                raise StateError(f"{exc}: apply the manifest generated from its profile's "
                                 f"deploy: ({s.manifest}) with `testbed up --profile lab "
                                 "--profiles FILE` or `kubectl apply -f`") from None
        self.metrics = self.backends.metrics(
            reach, [PromService(s.name, s.slo_ms, s.capacity, self.config.namespace)
                    for s in self.services])
        self.metrics.check()
        self.metrics.check_series()
        self.sessions = discover_sessions(self.hosts, ue_hosts, self.spec, groups)

    def __enter__(self) -> LabSession:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> list[str]:
        """Stop what the run started, restore replicas and shaping; returns what failed. A second
        call finds nothing left to undo."""
        problems: list[str] = []
        traffic, self._traffic = self._traffic, []
        for t in traffic:
            problems += t.close()
        original, self._original = self._original, {}
        if self.cluster is not None:
            for name, replicas in original.items():
                try:
                    if self.cluster.desired_replicas(name) != replicas:
                        self.cluster.scale(name, replicas)
                except StateError as exc:
                    problems.append(str(exc))
        if self._shaped:
            try:
                self.apply_shaping(self.spec)
            except StateError as exc:
                problems.append(str(exc))
            self._shaped = False
        return problems

    # --- per cell --------------------------------------------------------------------------

    def apply_shaping(self, spec: TestbedSpec) -> None:
        """The cell's slice shaping (link capacity, guarantees, slicing on/off) on the core host."""
        script = shaping_script(spec)
        if script == self._shaping:
            return
        assert self.hosts is not None
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "tb-slice-shaping"
            path.write_text(script)
            self.hosts.copy(self.core_host, path, SHAPING_SCRIPT, what="install the slice shaping")
        self.hosts.run(self.core_host, ["chmod", "0755", SHAPING_SCRIPT],
                       what="install the slice shaping")
        self.hosts.run(self.core_host, ["systemctl", "restart", "tb-slice-shaping"],
                       what=f"apply the slice shaping on {self.n6}")
        self._shaping = script
        self._shaped = True

    def scale_for_cell(self, replicas: dict[str, int]) -> None:
        """Scale-downs first so the cell's scale-ups find their units free."""
        assert self.cluster is not None
        want = {s.name: replicas.get(s.name, 0) for s in self.services}
        order = sorted(want, key=lambda n: want[n] - self.cluster.desired_replicas(n))
        for name in order:
            if self.cluster.desired_replicas(name) != want[name]:
                self.cluster.scale(name, want[name])

    async def wait_ready(self, replicas: dict[str, int], timeout_s: float) -> None:
        assert self.cluster is not None
        cluster = self.cluster
        for name, n in replicas.items():
            await asyncio.to_thread(cluster.wait_ready, name, n, timeout_s=timeout_s)

    def traffic(self, cell: str) -> LabTraffic:
        assert self.hosts is not None
        t = LabTraffic(self.hosts, self.sessions, self.iperf_servers,
                       {g.name: g.slice for g in self.spec.ue_groups},
                       cell=RunCell(self.run_id, cell), clock=self._clock)
        self._traffic.append(t)
        return t
