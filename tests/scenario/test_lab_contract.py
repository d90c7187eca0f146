"""One scenario code path, two profiles: the local backends and a fixture lab produce the same
run directory shape; and the lab's bad input (unreachable API server or Prometheus, no UE hosts,
a UE without a PDU session, a host lost mid-run) is one line, and the run stops what it started.

The fixture lab is tests/lab/fixture_lab.py: the official kubernetes client and PrometheusMetrics
over real HTTP against hand-written answers; the UE hosts are tests/lab/fakes.FakeHosts.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("kubernetes.client", reason="the lab extra (kubernetes) is not installed")

from kubernetes import client

from testbed.clock import PollClock
from testbed.cluster.kubernetes import KubeApis, KubernetesCluster, KubeService
from testbed.errors import MissingRequirement, StateError
from testbed.lab.hosts import HostFailed
from testbed.lab.plan import VirtualTime
from testbed.lab.session import LabConfig, LabService, LabSession
from testbed.load.traffic import IperfJob
from testbed.metrics.prometheus import PrometheusMetrics, PromService
from testbed.pytest_plugin import BESIDE_GROUP
from testbed.scenario.lab import LabOptions, LabProfile
from testbed.scenario.load import load_scenario
from testbed.scenario.results import run_rows
from testbed.scenario.runner import RunOptions, ScenarioRun, run_scenario
from tests.lab.fakes import FakeHosts
from tests.lab.fixture_lab import FixtureLab

SCENARIO = """\
name: contract
duration_s: 12
time_scale: 1
scaler_period_s: 10
total_units: 6
testbed:
  name: contract
  slices:
    - {name: ai, sst: 1, sd: "000001", subnet: 10.45.0.0/24, guaranteed_mbit: 20}
    - {name: be, sst: 1, sd: "000002", subnet: 10.46.0.0/24}
  ue_groups:
    - {name: ai, slice: ai, count: 2}
    - {name: be, slice: be, count: 2}
services:
  - {name: imgcls, replicas: 1, policy: rule_v2}
clients:
  - {service: imgcls, ue_group: ai, rate: 5}
"""

INVENTORY = """\
all:
  children:
    core: {hosts: {core1: {upf_n6_interface: eno2}}}
    ran: {hosts: {ran1: {}}}
    cluster_server: {hosts: {gpu1: {ansible_host: 192.168.20.20}}}
    traffic: {hosts: {traffic1: {iperf3_ports: [5201, 5202]}}}
"""


def _files(tmp_path: Path, inventory: str = INVENTORY) -> tuple[Path, Path]:
    scn = tmp_path / "contract.yaml"
    scn.write_text(SCENARIO)
    inv = tmp_path / "inventory.yml"
    inv.write_text(inventory)
    return scn, inv


def _kube(url: str) -> KubernetesCluster:
    cfg = client.Configuration()
    cfg.host = url
    api = client.ApiClient(cfg)
    return KubernetesCluster([KubeService("imgcls", units_per_replica=1)], "drafas",
                             apis=KubeApis(client.AppsV1Api(api), client.CoreV1Api(api)),
                             max_units=6, node_address="192.168.20.20")


class FixtureBackends:
    """The session's backends pointed at the fixture lab (a real HTTP server speaking the
    Kubernetes and Prometheus APIs) and at FakeHosts, on a virtual clock."""

    def __init__(self, hosts: FakeHosts, kube_url: str, prom_url: str, vt: VirtualTime):
        self._hosts, self.kube_url, self.prom_url, self.vt = hosts, kube_url, prom_url, vt
        self.clock = PollClock(vt.monotonic, vt.advance)

    def hosts(self, reach) -> FakeHosts:
        return self._hosts

    def cluster(self, reach, services) -> KubernetesCluster:
        return _kube(self.kube_url)

    def metrics(self, reach, services) -> PrometheusMetrics:
        return PrometheusMetrics(self.prom_url, [PromService("imgcls", 500, 4)],
                                 now=self.vt.time, timeout_s=2)


def _lab_factory(inv: Path, hosts: FakeHosts, kube_url: str, prom_url: str):
    def factory(run: ScenarioRun) -> LabProfile:
        vt = VirtualTime()
        session = LabSession(
            LabConfig(inv), LabProfile._services(run.scenario, run.loaded.base_dir, run.run_dir,
                                                 "drafas")[0],
            run.loaded.testbed, run.run_dir, run.run_dir.name, total_units=6,
            backends=FixtureBackends(hosts, kube_url, prom_url, vt))
        return LabProfile(LabOptions(inv), run.scenario, run.loaded.testbed, run.loaded.base_dir,
                          run.run_dir, session=session, clock=vt)
    return factory


def _cell(run_dir: Path) -> Path:
    (cell,) = (run_dir / "cells").glob("*/rep-0")
    return cell


def _shape(run_dir: Path) -> dict:
    cell = _cell(run_dir)
    samples = [json.loads(x) for x in (cell / "samples.jsonl").read_text().splitlines()]
    decisions = [json.loads(x) for x in (cell / "decisions.jsonl").read_text().splitlines()]
    rows = [r for r in run_rows(run_dir) if r.get("service") == "imgcls"]
    # replicas.jsonl: what the replicas report they run; only the local cluster can ask them.
    # net.jsonl: the local data plane's HTB counters; no lab role starts the sampler (docs/lab.md)
    # host.jsonl: the steal and waits of the processes on this host; the lab's run on its own
    local_only = ("events.jsonl", "replicas.jsonl", "net.jsonl", "host.jsonl")
    return {"files": sorted(p.name for p in cell.iterdir() if p.is_file() and p.name not in local_only),
            "requests": sorted(p.name for p in (cell / "requests").iterdir()),
            "sample_keys": sorted(samples[0]), "decision_keys": sorted(decisions[0]),
            "row_keys": sorted(rows[0]), "status": json.loads((cell / "cell.json").read_text())["status"],
            "requests_ok": rows[0]["requests"] > 0}


@pytest.mark.needs_root
@pytest.mark.xdist_group(BESIDE_GROUP)  # one such testbed at a time
def test_same_scenario_code_path_on_local_backends_and_a_fixture_lab(tmp_path: Path):
    scn, inv = _files(tmp_path)
    local = run_scenario(load_scenario(scn), RunOptions(out_root=tmp_path / "local",
                                                        progress=False))
    with FixtureLab(replicas=2) as lab:  # the cell scales it to 1 first
        hosts = FakeHosts()
        fixture = run_scenario(load_scenario(scn), RunOptions(
            out_root=tmp_path / "lab", profile="lab", progress=False,
            profile_factory=_lab_factory(inv, hosts, lab.url, lab.url)))
        patches = [r for r in lab.requests if r[0] == "PATCH"]
    assert local.problems == [] and fixture.problems == []
    assert _shape(local.run_dir) == _shape(fixture.run_dir)
    assert _shape(fixture.run_dir)["status"] == "ok"
    assert (_cell(local.run_dir) / "replicas.jsonl").is_file()
    assert not (_cell(fixture.run_dir) / "replicas.jsonl").exists()
    # the lab run used the scale subresource, and stopped every unit it started on the UE host
    assert patches and all(p[1].endswith("/deployments/imgcls/scale") for p in patches)
    assert not hosts.active


def test_fixture_lab_scaler_decisions_reach_the_deployment(tmp_path: Path):
    scn, inv = _files(tmp_path)
    with FixtureLab(replicas=2) as lab:
        hosts = FakeHosts()
        result = run_scenario(load_scenario(scn), RunOptions(
            out_root=tmp_path, profile="lab", progress=False,
            profile_factory=_lab_factory(inv, hosts, lab.url, lab.url)))
        replicas_at_end = lab.replicas["imgcls"]
    decisions = [json.loads(x) for x in (_cell(result.run_dir) / "decisions.jsonl").read_text().splitlines()]
    # 30 req/s at 170 ms on a replica of capacity 4: rule-based v2 scales up
    assert decisions and decisions[0]["applied"] > 0
    assert decisions[0]["replicas_after"] == decisions[0]["replicas_before"] + decisions[0]["applied"]
    # the run put the Deployment back where it found it
    assert replicas_at_end == 2
    assert not hosts.active
    # the cell's record names the imgcls server's mode its manifest ran (issue 42)
    assert json.loads((_cell(result.run_dir) / "cell.json").read_text())["lab"]["server_modes"] == \
        {"imgcls": "overlap"}


def test_unreachable_api_server_is_one_line_and_starts_nothing(tmp_path: Path):
    scn, inv = _files(tmp_path)
    hosts = FakeHosts()
    with FixtureLab() as lab, pytest.raises(MissingRequirement) as err:
        ScenarioRun(load_scenario(scn), RunOptions(
            out_root=tmp_path, profile="lab", progress=False,
            profile_factory=_lab_factory(inv, hosts, "http://127.0.0.1:1", lab.url)))
    assert str(err.value).startswith("http://127.0.0.1:1: Kubernetes API server unreachable")
    assert "\n" not in str(err.value)
    assert not any(a[0] == "systemd-run" for a in hosts.commands())


def test_unreachable_prometheus_is_one_line_and_starts_nothing(tmp_path: Path):
    scn, inv = _files(tmp_path)
    hosts = FakeHosts()
    with FixtureLab() as lab, pytest.raises(MissingRequirement) as err:
        ScenarioRun(load_scenario(scn), RunOptions(
            out_root=tmp_path, profile="lab", progress=False,
            profile_factory=_lab_factory(inv, hosts, lab.url, "http://127.0.0.1:1")))
    assert str(err.value) == ("Prometheus at http://127.0.0.1:1 is unreachable: "
                              "[Errno 111] Connection refused")
    assert not any(a[0] == "systemd-run" for a in hosts.commands())


def test_ue_without_pdu_session(tmp_path: Path):
    scn, inv = _files(tmp_path)
    hosts = FakeHosts(sessions=[("uesimtun0", "10.46.0.2")])
    with FixtureLab() as lab, pytest.raises(StateError, match=r"^ran1: UE group 'ai' has no PDU "
                                             r"session for 2 of 2 UEs of slice 'ai'"):
        ScenarioRun(load_scenario(scn), RunOptions(
            out_root=tmp_path, profile="lab", progress=False,
            profile_factory=_lab_factory(inv, hosts, lab.url, lab.url)))


def test_inventory_without_ue_hosts(tmp_path: Path):
    scn, inv = _files(tmp_path, INVENTORY.replace("    ran: {hosts: {ran1: {}}}\n", ""))
    with FixtureLab() as lab, pytest.raises(MissingRequirement, match="no UE hosts"):
        ScenarioRun(load_scenario(scn), RunOptions(
            out_root=tmp_path, profile="lab", progress=False,
            profile_factory=_lab_factory(inv, FakeHosts(), lab.url, lab.url)))


def test_host_lost_mid_run_stops_what_was_started_and_restores_replicas(tmp_path: Path):
    scn, inv = _files(tmp_path)
    scn.write_text(SCENARIO + "cross_traffic:\n  - {slice: be, flows: 2}\n")

    class LosesRanWhenClientsStart(FakeHosts):
        def run(self, host, argv, *, what, check=True):
            if "load" in argv and "--source" in argv:
                self.calls.append(("run", host, tuple(argv)))
                raise HostFailed(host, what, "Failed to connect to the host via ssh",
                                 unreachable=True)
            return super().run(host, argv, what=what, check=check)

    hosts = LosesRanWhenClientsStart()
    with FixtureLab(replicas=3) as lab:
        with pytest.raises(HostFailed, match=r"^ran1: start client 0 \(imgcls\) on uesimtun0 "
                           r"10.45.0.2: unreachable"):
            run_scenario(load_scenario(scn), RunOptions(
                out_root=tmp_path, profile="lab", progress=False,
                profile_factory=_lab_factory(inv, hosts, lab.url, lab.url)))
        assert lab.replicas["imgcls"] == 3  # scaled to 1 for the cell, then put back
    assert any(a[0] == "systemd-run" and "iperf3" in a for a in hosts.commands())
    assert not hosts.active  # iperf3 was stopped again


def _session(inv: Path, loaded, hosts: FakeHosts, lab: FixtureLab, run_dir: Path) -> LabSession:
    vt = VirtualTime()
    return LabSession(
        LabConfig(inv), [LabService("imgcls", 500, 4)], loaded.testbed, run_dir, "R1",
        total_units=6, backends=FixtureBackends(hosts, lab.url, lab.url, vt))


def _shaping_restarts(hosts: FakeHosts) -> int:
    return sum(a[:2] == ("systemctl", "restart") for a in hosts.commands("core1"))


def test_lab_session_with_block_left_by_an_exception_restores_the_lab(tmp_path: Path):
    scn, inv = _files(tmp_path)
    loaded = load_scenario(scn)
    unsliced = loaded.testbed.model_copy(update={"link": loaded.testbed.link.model_copy(
        update={"slicing": False})})
    hosts = FakeHosts()
    with FixtureLab(replicas=3) as lab:
        session = _session(inv, loaded, hosts, lab, tmp_path)
        with pytest.raises(RuntimeError, match="the cell failed"), session:
            session.open(["ai", "be"])
            session.apply_shaping(unsliced)
            session.scale_for_cell({"imgcls": 1})
            asyncio.run(session.traffic("c0-rep-0").start_iperf(
                [IperfJob("be", 2, 10, False, tmp_path / "be.json")]))
            assert lab.replicas["imgcls"] == 1 and hosts.active and _shaping_restarts(hosts) == 1
            raise RuntimeError("the cell failed")
        # units stopped, replicas and the run's own shaping back
        assert not hosts.active and lab.replicas["imgcls"] == 3 and _shaping_restarts(hosts) == 2
        before = (len(hosts.calls), len(lab.requests))
        assert session.close() == []  # the second close has nothing left to undo
        assert (len(hosts.calls), len(lab.requests)) == before


def test_lab_profile_with_block_left_by_an_exception_restores_the_replicas(tmp_path: Path):
    scn, inv = _files(tmp_path)
    loaded = load_scenario(scn)
    with FixtureLab(replicas=3) as lab:
        session = _session(inv, loaded, FakeHosts(), lab, tmp_path)
        with pytest.raises(RuntimeError, match="the run failed"), LabProfile(
                LabOptions(inv), loaded.scenario, loaded.testbed, loaded.base_dir, tmp_path,
                session=session, clock=VirtualTime()) as profile:
            profile.session.scale_for_cell({"imgcls": 1})
            assert lab.replicas["imgcls"] == 1
            raise RuntimeError("the run failed")
        assert lab.replicas["imgcls"] == 3
        before = len(lab.requests)
        assert profile.close() == []
        assert len(lab.requests) == before


class FakeProfile:
    """A scenario profile that only counts how often the run closes it."""

    name = "fake"

    def __init__(self) -> None:
        self.closes = 0

    def run_cell(self, runner, main) -> None:
        raise AssertionError("no cell runs in this test")

    def close(self) -> list[str]:
        self.closes += 1
        return ["unit tb-run-x did not stop"]


def test_scenario_run_with_block_left_by_an_exception_closes_its_profile_once(tmp_path: Path):
    scn, _ = _files(tmp_path)
    profile = FakeProfile()
    with pytest.raises(RuntimeError, match="interrupted"), ScenarioRun(
            load_scenario(scn), RunOptions(out_root=tmp_path, profile="lab", progress=False,
                                           profile_factory=lambda run: profile)) as run:
        assert profile.closes == 0
        raise RuntimeError("interrupted")
    assert profile.closes == 1 and run.problems == ["cleanup: unit tb-run-x did not stop"]
    run.close()
    assert profile.closes == 1 and run.problems == ["cleanup: unit tb-run-x did not stop"]


def test_a_lab_cell_read_the_drafas_way_counts_running_pods_and_samples_the_sidecars(tmp_path: Path):
    """measure: drafas on the lab: the scaler's utilization is the sidecars' sampled in-flight
    (3, capacity 4) over the Deployment's pods in phase Running, listed from the API server by its
    selector, and the cell says how it measured."""
    scn, inv = _files(tmp_path)
    scn.write_text(SCENARIO + "measure: drafas\n")
    with FixtureLab(replicas=2) as lab:
        result = run_scenario(load_scenario(scn), RunOptions(
            out_root=tmp_path, profile="lab", progress=False,
            profile_factory=_lab_factory(inv, FakeHosts(), lab.url, lab.url)))
        listed = [q for m, path, q in lab.requests if path == "/api/v1/namespaces/drafas/pods"]
    assert result.problems == []
    decisions = [json.loads(x) for x in (_cell(result.run_dir) / "decisions.jsonl").read_text().splitlines()]
    first = decisions[0]
    assert first["utilization"] == pytest.approx(3 / 4 / first["replicas_before"])
    assert listed and listed[0]["fieldSelector"] == ["status.phase=Running"]
    assert listed[0]["labelSelector"] == ["app=imgcls"]  # the fixture Deployment's selector
    assert json.loads((result.run_dir / "manifest.json").read_text())["scenario"]["measure"] == "drafas"
