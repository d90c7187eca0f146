"""LabTraffic, PDU-session discovery and the inventory against a fake HostRunner."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from testbed.clock import PollClock
from testbed.config import TestbedSpec
from testbed.errors import MissingRequirement, StateError
from testbed.lab.inventory import LabInventory
from testbed.lab.traffic import LabTraffic, RunCell, discover_sessions, parse_sessions
from testbed.load.traffic import ClientJob, IperfJob, TrafficBackend
from tests.lab.fakes import FakeHosts

SPEC = TestbedSpec.model_validate({
    "name": "t", "slices": [
        {"name": "ai", "sst": 1, "sd": "000001", "subnet": "10.45.0.0/24", "guaranteed_mbit": 20},
        {"name": "be", "sst": 1, "sd": "000002", "subnet": "10.46.0.0/24"}],
    "ue_groups": [{"name": "ai", "slice": "ai", "count": 2}, {"name": "be", "slice": "be", "count": 2}]})


def _traffic(hosts: FakeHosts) -> LabTraffic:
    sessions = discover_sessions(hosts, ["ran1"], SPEC, ["ai", "be"])
    t = [0.0]
    return LabTraffic(hosts, sessions, [("192.168.20.30", 5201), ("192.168.20.30", 5202)],
                      {"ai": "ai", "be": "be"}, cell=RunCell("R1", "c0-rep-0"),
                      clock=PollClock(lambda: t[0], lambda s: t.__setitem__(0, t[0] + s)))


def test_sessions_by_slice_subnet():
    out = "9: uesimtun0    inet 10.45.0.7/32 scope global uesimtun0\n2: eth0    inet 10.45.0.9/24 x"
    (s,) = parse_sessions("ran1", out, SPEC)
    assert (s.host, s.tun, s.address, s.slice) == ("ran1", "uesimtun0", "10.45.0.7", "ai")


def test_ue_group_without_pdu_session_names_host_and_group():
    hosts = FakeHosts(sessions=[("uesimtun0", "10.45.0.2"), ("uesimtun1", "10.45.0.3")])
    with pytest.raises(StateError, match=r"ran1: UE group 'be' has no PDU session for 2 of 2 UEs"):
        discover_sessions(hosts, ["ran1"], SPEC, ["ai", "be"])


def test_clients_and_iperf_bound_to_the_ue_address_and_records_fetched(tmp_path: Path):
    hosts = FakeHosts()
    traffic = _traffic(hosts)
    assert isinstance(traffic, TrafficBackend)
    (tmp_path / "requests").mkdir()
    (tmp_path / "iperf").mkdir()
    client = ClientJob(0, "imgcls", "ai", "http://192.168.20.20:30802",
                       tmp_path / "requests" / "imgcls-ai-0.jsonl", ("--rate", "30"))
    iperf = IperfJob("be", 10, 61, True, tmp_path / "iperf" / "be-downlink.json")
    asyncio.run(traffic.start_iperf([iperf]))
    asyncio.run(traffic.start_clients([client]))
    runs = [a for a in hosts.commands("ran1") if a[0] == "systemd-run"]
    ip = runs[0][runs[0].index("--") + 1:]
    assert ip[:3] == ("iperf3", "-c", "192.168.20.30") and ip[5:7] == ("-B", "10.46.0.3") \
        and ip[-1] == "-R" and "--json" in ip
    load = runs[1][runs[1].index("--") + 1:]
    assert load[1:4] == ("-m", "testbed", "load") and "--source" in load
    assert load[load.index("--source") + 1] == "10.45.0.2" and load[-2:] == ("--rate", "30")
    assert traffic.clients_running()
    assert asyncio.run(traffic.stop()) == []
    assert not hosts.active
    assert client.out.read_text().startswith('{"service":"imgcls"')
    assert iperf.out.is_file() and (tmp_path / "logs" / "client-0.log").is_file()


def test_close_stops_every_unit_the_cell_started(tmp_path: Path):
    hosts = FakeHosts()
    traffic = _traffic(hosts)
    asyncio.run(traffic.start_iperf([IperfJob("be", 2, 10, False, tmp_path / "be.json")]))
    assert hosts.active
    traffic.close()
    traffic.close()  # idempotent
    assert not hosts.active


def test_with_block_left_by_an_exception_stops_the_units(tmp_path: Path):
    hosts = FakeHosts()
    with pytest.raises(RuntimeError, match="the cell failed"), _traffic(hosts) as traffic:
        asyncio.run(traffic.start_iperf([IperfJob("be", 2, 10, False, tmp_path / "be.json")]))
        assert hosts.active
        raise RuntimeError("the cell failed")
    assert not hosts.active
    calls = len(hosts.calls)
    assert traffic.close() == []
    assert len(hosts.calls) == calls  # nothing left to stop


def test_more_iperf_sets_than_server_ports_is_refused(tmp_path: Path):
    traffic = _traffic(FakeHosts())
    jobs = [IperfJob("be", 1, 10, bool(i % 2), tmp_path / f"{i}.json") for i in range(3)]
    with pytest.raises(StateError, match="3 iperf3 flow sets need as many iperf3 server ports"):
        asyncio.run(traffic.start_iperf(jobs))


def test_inventory_without_ue_hosts(tmp_path: Path):
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  children:\n    core:\n      hosts:\n        core1:\n    ran:\n      hosts: {}\n")
    with pytest.raises(MissingRequirement, match=r"inv.yml: no UE hosts: the inventory's group 'ran'"):
        LabInventory.load(inv).ue_hosts()


def test_example_inventory_groups_and_vars():
    inv = LabInventory.load(Path(__file__).parents[2] / "playbooks" / "inventory.example.yml")
    assert inv.ue_hosts() == ["ran1"]
    assert inv.var("traffic1", "iperf3_ports") == [5201, 5202]
    assert inv.var("gpu1", "prometheus_node_port") == 30090 and inv.address("gpu1") == "gpu1.lab.example"
