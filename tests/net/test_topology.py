from __future__ import annotations

import ipaddress

from testbed.config import load_testbed
from testbed.net.topology import N3, RAN, Topology


def test_names_carry_the_prefix():
    topo = Topology.from_spec(load_testbed())
    assert topo.namespaces == ["tb-main-upf", "tb-main-dn", "tb-main-ue-ai", "tb-main-ue-be"]
    assert all(n.startswith(topo.prefix + "-") for n in topo.namespaces)


def test_ue_addresses_are_sequential_per_slice_after_the_gateway():
    spec = load_testbed()
    spec = spec.model_copy(update={"ue_groups": [
        *spec.ue_groups,
        spec.ue_groups[0].model_copy(update={"name": "ai2", "count": 2}),
    ]})
    topo = Topology.from_spec(spec)
    ai = [str(u.address) for u in topo.ues_of_slice("ai")]
    assert ai == ["10.45.0.2", "10.45.0.3", "10.45.0.4", "10.45.0.5"]
    assert [u.group for u in topo.ues_of_slice("ai")] == ["ai", "ai", "ai2", "ai2"]
    assert topo.slice_of_group("ai2").gateway == ipaddress.IPv4Address("10.45.0.1")


def test_build_commands_are_argument_lists_in_dependency_order():
    topo = Topology.from_spec(load_testbed())
    cmds = topo.build_commands()
    assert all(isinstance(c, list) and all(isinstance(a, str) for a in c) for c in cmds)
    flat = [" ".join(c) for c in cmds]
    first_veth = next(i for i, c in enumerate(flat) if "type veth" in c)
    last_netns = max(i for i, c in enumerate(flat) if c.startswith("ip netns add"))
    assert last_netns < first_veth
    # veths are created straight inside their namespaces: nothing in the root namespace
    assert "ip link add ue-ai netns tb-main-upf type veth peer name ran0 netns tb-main-ue-ai" in flat
    assert "ip -n tb-main-upf link set ue-ai master n3" in flat
    assert "ip -n tb-main-upf addr add 10.45.0.1/24 dev n3" in flat
    assert "ip -n tb-main-ue-ai addr add 10.45.0.3/24 dev ran0" in flat
    assert "ip -n tb-main-ue-ai route add default via 10.45.0.1" in flat
    assert "ip -n tb-main-dn route add default via 10.200.0.1" in flat
    assert f"ip -n tb-main-ue-be link set {RAN} gso_max_size 1514 up" in flat
    assert any(c.endswith("net.ipv4.ip_forward=1") for c in flat)
    assert N3 == "n3"


def test_segmentation_offload_lifts_the_packet_size_on_every_veth():
    spec = load_testbed()
    offload = spec.model_copy(update={"link": spec.link.model_copy(update={"segmentation": "offload"})})
    sizes = {c[c.index("gso_max_size") + 1] for spec_ in (offload,)
             for c in Topology.from_spec(spec_).build_commands() if "gso_max_size" in c}
    assert sizes == {"65536"}
    default = {c[c.index("gso_max_size") + 1] for c in Topology.from_spec(spec).build_commands()
               if "gso_max_size" in c}
    assert default == {"1514"}
