from __future__ import annotations

import pytest

from testbed.config import LinkSpec, load_testbed
from testbed.net.shaping import Shaper, flow_bucket, shapers_for


def _shapers(**link):
    spec = load_testbed()
    spec = spec.model_copy(update={"link": spec.link.model_copy(update=link)})
    return shapers_for(spec.link, list(spec.slices), n3="n3", n6="n6")


def test_one_tree_per_direction_with_matching_keys():
    up, down = _shapers()
    assert (up.device, up.direction) == ("n6", "uplink")
    assert (down.device, down.direction) == ("n3", "downlink")
    up_filters = [c for c in up.commands() if c[1] == "filter"]
    down_filters = [c for c in down.commands() if c[1] == "filter"]
    assert [f[f.index("match") + 2:f.index("match") + 4] for f in up_filters] == [
        ["src", "10.45.0.0/24"], ["src", "10.46.0.0/24"]]
    assert [f[f.index("match") + 2:f.index("match") + 4] for f in down_filters] == [
        ["dst", "10.45.0.0/24"], ["dst", "10.46.0.0/24"]]


def test_rates_guarantee_ceiling_and_default_class():
    up, _ = _shapers()
    classes = {c.slice: c for c in up.classes}
    assert classes["ai"].rate_mbit == 20 and classes["ai"].ceil_mbit == 100
    assert classes["be"].rate_mbit == 0 and classes["be"].ceil_mbit == 100
    assert classes["-"].rate_mbit == 80  # the unreserved rest goes to unsliced traffic
    cmds = [" ".join(c) for c in up.commands()]
    assert "tc qdisc replace dev n6 root handle 1: htb default ff" in cmds
    assert any("classid 1:100 htb rate 20000kbit ceil 100000kbit" in c for c in cmds)
    # a best-effort slice still needs a positive HTB rate
    assert any("classid 1:101 htb rate 8kbit ceil 100000kbit" in c for c in cmds)
    assert any(c.endswith("parent 1:100 handle 10: pfifo limit 100") for c in cmds)


def test_slicing_off_is_one_shared_class_without_filters():
    up, down = _shapers(slicing=False)
    for s in (up, down):
        assert [c.slice for c in s.classes] == ["-"]
        assert s.classes[0].rate_mbit == 100
        assert not [c for c in s.commands() if c[1] == "filter"]


def test_delay_uses_netem_leaves_with_the_queue_limit():
    up, _ = _shapers(delay_ms=5, queue_packets=50)
    leaves = [c for c in up.commands() if c[1] == "qdisc" and "parent" in c]
    assert all(c[-5:] == ["netem", "delay", "5ms", "limit", "50"] for c in leaves)


def test_ceiling_is_used_when_given():
    spec = load_testbed()
    ai = spec.slices[0].model_copy(update={"ceiling_mbit": 30})
    s = Shaper("n6", "uplink", spec.link, (ai, spec.slices[1]))
    assert s.classes[0].ceil_mbit == 30


def test_each_direction_takes_its_own_capacity():
    up, down = _shapers(uplink_mbit=50, downlink_mbit=400)
    assert {c.slice: c.ceil_mbit for c in up.classes} == {"ai": 50, "be": 50, "-": 50}
    assert {c.slice: c.ceil_mbit for c in down.classes} == {"ai": 400, "be": 400, "-": 400}
    assert next(c for c in down.classes if c.slice == "-").rate_mbit == 380
    assert any("classid 1:1 htb rate 400000kbit ceil 400000kbit" in " ".join(c)
               for c in down.commands())


def test_flow_queues_make_each_class_round_robin_over_hashed_leaves():
    up, down = _shapers(flow_queues=4, slicing=False)  # per-class, the default
    cmds = [" ".join(c) for c in up.commands()]
    # the default class is inner: four leaves under it, each with its own FIFO
    leaves = [c for c in cmds if c.startswith("tc class add dev n6 parent 1:ff ")]
    assert len(leaves) == 4 and all("rate 25000kbit ceil 100000kbit" in c for c in leaves)
    assert sum(c.startswith("tc qdisc add dev n6 parent 1:10") and c.endswith("pfifo limit 100")
               for c in cmds) == 4
    # hashed on the UE's port (bits 1-2 here): the source port uplink, the destination port downlink
    assert any("hashkey mask 0x00060000 at 20 link 2:" in c for c in cmds)
    assert any("hashkey mask 0x00000006 at 20 link 2:" in " ".join(c) for c in down.commands())
    # HTB's default must be a leaf, so a catch-all filter sends the rest to the inner class
    assert cmds[-1].endswith("prio 2 u32 match u32 0 0 flowid 1:ff")


def test_per_slice_flow_queues_give_each_slice_its_own_queues_in_a_shared_class():
    """Slicing off, the ai and be slices share the default class but not a flow queue: each
    slice's subnet is hashed into its own set of leaves (and the rest into a third)."""
    up, down = _shapers(flow_queues=4, slicing=False, flow_queue_sets="per-slice")
    for shaper, key in ((up, "src"), (down, "dst")):
        cmds = [" ".join(c) for c in shaper.commands()]
        links = [c for c in cmds if " link " in c]
        assert [c.split("protocol ip u32 ")[1].split(" hashkey")[0] for c in links] == [
            f"match ip {key} 10.45.0.0/24", f"match ip {key} 10.46.0.0/24", "match u32 0 0"]
        assert [c.split(" link ")[1] for c in links] == ["2:", "3:", "4:"]
        leaves = [c for c in cmds if c.startswith(f"tc class add dev {shaper.device} parent 1:ff ")]
        # 12 leaves that split the class's guarantee; no two sets share a leaf number
        assert len(leaves) == 12 and all("rate 8333kbit ceil 100000kbit" in c for c in leaves)
        assert len({c.split(" classid ")[1].split()[0] for c in leaves}) == 12
        buckets = [c for c in cmds if " ht " in c]
        assert {c.split(" ht ")[1].split(":")[0] for c in buckets} == {"2", "3", "4"}


def test_per_slice_flow_queues_change_nothing_where_each_class_carries_one_slice():
    per_slice, _ = _shapers(flow_queues=4, flow_queue_sets="per-slice")
    per_class, _ = _shapers(flow_queues=4)
    assert per_slice.commands() == per_class.commands()


def test_flow_queues_with_slices_use_one_hash_table_per_class():
    up, _ = _shapers(flow_queues=2)
    tables = [c for c in up.commands() if "divisor" in c]
    assert [(t[t.index("parent") + 1], t[t.index("handle") + 1]) for t in tables] == [
        ("1:100", "2:"), ("1:101", "3:"), ("1:ff", "4:")]
    assert up.batch().splitlines()[0] == "qdisc replace dev n6 root handle 1: htb default ff"


def test_flow_queue_hash_spreads_the_even_ports_connect_picks():
    """Linux's connect() takes even ephemeral ports; u32 hashes (word & mask) >> (lowest set bit
    of the mask). Every bucket must be reachable from even ports alone."""
    up, down = _shapers(flow_queues=256, slicing=False)
    for shaper, word_of in ((up, lambda port: port << 16 | 5201), (down, lambda port: 5201 << 16 | port)):
        line = next(" ".join(c) for c in shaper.commands() if "hashkey" in c)
        mask = int(line.split("hashkey mask ")[1].split()[0], 16)
        shift = (mask & -mask).bit_length() - 1
        buckets = {((word_of(port) & mask) >> shift) & 255 for port in range(32768, 60999, 2)}
        assert buckets == set(range(256))
        # flow_bucket (what the benches hash ports with) is the filter's rule, port for port
        assert all(((word_of(port) & mask) >> shift) & 255 == flow_bucket(port, 256)
                   for port in range(32768, 61000))


def test_flow_queue_packets_is_the_limit_of_every_flow_queue_not_of_class_fifos():
    up, down = _shapers(flow_queues=4, flow_queue_packets=20, queue_packets=300)
    for shaper in (up, down):
        leaves = [c for c in shaper.commands() if c[1] == "qdisc" and "parent" in c]
        assert len(leaves) == 3 * 4  # ai, be and the default class, four flow queues each
        assert all(c[-3:] == ["pfifo", "limit", "20"] for c in leaves)
    # without flow queues each class has one FIFO of queue_packets
    fifo, _ = _shapers(queue_packets=300)
    assert [c[-3:] for c in fifo.commands() if c[1] == "qdisc" and "parent" in c] == [
        ["pfifo", "limit", "300"]] * 3


def test_flow_queue_bytes_makes_every_flow_queue_a_byte_fifo():
    up, down = _shapers(flow_queues=4, flow_queue_bytes=30000, queue_packets=300)
    for shaper in (up, down):
        leaves = [c for c in shaper.commands() if c[1] == "qdisc" and "parent" in c]
        assert len(leaves) == 12 and all(c[-3:] == ["bfifo", "limit", "30000"] for c in leaves)


def test_flow_queue_drop_head_makes_every_flow_queue_drop_its_oldest_packet():
    up, _ = _shapers(flow_queues=2, flow_queue_packets=20, flow_queue_drop="head")
    leaves = [c for c in up.commands() if c[1] == "qdisc" and "parent" in c]
    assert len(leaves) == 6 and all(c[-3:] == ["pfifo_head_drop", "limit", "20"] for c in leaves)


def test_uplink_loss_draws_packets_into_a_zero_queue_before_any_slice_filter():
    up, down = _shapers(uplink_loss=0.01)
    cmds = [" ".join(c) for c in up.commands()]
    bpf = [c for c in cmds if " bpf " in c]
    assert len(bpf) == 1 and " prio 1 " in bpf[0] and bpf[0].endswith("flowid 1:fe")
    # A = random; A > 0.99 * 2^32 matches (1 %) and goes to 1:fe, a pfifo of length 0
    program = bpf[0].split("bytecode ")[1].split(" flowid")[0]
    assert program == f"4,32 0 0 {0xFFFFF000 + 56},37 0 1 {round(0.99 * 2**32)},6 0 0 4294967295,6 0 0 0"
    assert any(c.endswith("parent 1:fe handle fe: pfifo limit 0") for c in cmds)
    # the slices' filters move down one priority; the tc batch keeps the program one word
    root_u32 = [c.split(" prio ")[1].split()[0] for c in cmds if "parent 1: " in c and " u32 " in c]
    assert root_u32 == ["2", "2"]  # the ai and be slices (the default class is HTB's default)
    assert f'bytecode "{program}" flowid 1:fe' in up.batch()
    # the downlink and a lossless link have none of it
    assert not any(" bpf " in " ".join(c) for c in down.commands())
    lossless, _ = _shapers()
    assert not any(" bpf " in " ".join(c) for c in lossless.commands())


def test_perturbed_flow_queues_hash_with_a_salted_program_instead_of_u32_tables():
    up, down = _shapers(flow_queues=256, slicing=False, flow_queue_perturb_s=2)
    for shaper in (up, down):
        cmds = shaper.commands()
        assert not any("u32" in c and c[1] == "filter" and c[6] != "1:" for c in cmds)
        [program] = [c for c in cmds if "bpf" in c]
        assert program[:3] == ["tc", "filter", "add"] and "handle" in program
        redrawn = shaper.salted_filters(7)
        assert [c[:3] for c in redrawn] == [["tc", "filter", "replace"]]
        assert redrawn[0][3:-1] == program[3:-1] and redrawn[0][-1] != program[-1]  # only the salt
    # every bucket is reachable from the even ports connect() picks, whatever the salt
    for salt in (0, 1, 0xDEADBEEF):
        assert {flow_bucket(p, 256, salt) for p in range(32768, 60999, 2)} == set(range(256))


def test_flow_queue_perturb_needs_flow_queues():
    with pytest.raises(ValueError, match="flow_queue_perturb_s sets each flow queue"):
        LinkSpec(flow_queue_perturb_s=2)


def _ue_shapers(n: int, **group):
    """Uplink and downlink shapers of the default testbed with `n` UEs in group ai (with `group`'s
    fields), placed as the topology places them."""
    from testbed.net.shaping import ue_shapes
    from testbed.net.topology import Topology

    spec = load_testbed()
    ai = spec.slices[0].model_copy(update={"subnet": __import__("ipaddress").ip_network("10.44.0.0/22")})
    groups = [spec.ue_groups[0].model_copy(update={"count": n, **group}), spec.ue_groups[1]]
    spec = spec.model_copy(update={"slices": [ai, spec.slices[1]], "ue_groups": groups})
    ues = ue_shapes(spec, Topology.from_spec(spec).ues)
    return shapers_for(spec.link, list(spec.slices), n3="n3", n6="n6", ues=ues)


def test_a_ue_with_a_binding_ambr_gets_its_own_leaf_found_by_a_hash_of_its_last_octet():
    up, down = _ue_shapers(2, ambr_uplink_mbit=5.0)
    assert [(u.ue.address, u.parent, u.classid, u.ceil_mbit) for u in up.ue_classes] == [
        ("10.44.0.2", "1:100", "1:4000", 5.0), ("10.44.0.3", "1:100", "1:4001", 5.0)]
    assert down.ue_classes == []  # 1000 Mbit/s down binds nothing on a 100 Mbit/s link
    cmds = [" ".join(c) for c in up.commands()]
    assert "tc filter add dev n6 parent 1: prio 1 handle 400: protocol ip u32 divisor 256" in cmds
    assert ("tc filter add dev n6 parent 1: prio 1 protocol ip u32 ht 400:3: match ip src "
            "10.44.0.3/32 flowid 1:4001") in cmds
    assert cmds[-1].endswith("match u32 0 0 hashkey mask 0x000000ff at 12 link 400:")
    # the slices' filters come after the UEs' hash; the ai class's other UEs get a leaf of their own
    assert any("prio 2 u32 match ip src 10.44.0.0/22 flowid 1:100" in c for c in cmds)
    assert "tc filter add dev n6 parent 1:100 prio 1 protocol ip u32 match u32 0 0 flowid 1:200" in cmds


def test_a_thousand_ues_cost_a_packet_at_most_four_keys():
    up, _ = _ue_shapers(1000, ambr_uplink_mbit=5.0)
    buckets: dict[str, int] = {}
    for c in up.commands():
        if "ht" in c:
            buckets[c[c.index("ht") + 1]] = buckets.get(c[c.index("ht") + 1], 0) + 1
    assert len(up.ue_classes) == 1000 and len(buckets) == 256 and max(buckets.values()) == 4


@pytest.mark.parametrize(("five_qi", "prio"), [(69, 0), (5, 0), (1, 1), (82, 1), (6, 4), (9, 7)])
def test_5qi_maps_to_htb_prio_through_its_priority_level(five_qi, prio):
    from testbed.net.shaping import htb_prio

    assert htb_prio(five_qi) == prio
    up, down = _ue_shapers(1, five_qi=five_qi)
    if five_qi == 9:  # the default's: nothing to enforce, no leaf
        assert up.ue_classes == down.ue_classes == []
    else:
        assert [(u.prio, u.ceil_mbit) for u in up.ue_classes + down.ue_classes] == [(prio, 100)] * 2


def test_lab_shaper_leaves_ambr_to_the_gnb():
    up, _ = _ue_shapers(1, ambr_uplink_mbit=5.0, five_qi=5)
    lab = Shaper(up.device, up.direction, up.link, up.slices, up.ues, enforce_ambr=False)
    assert [u.ceil_mbit for u in lab.ue_classes] == [100]
    assert [u.ceil_mbit for u in up.ue_classes] == [5]
