"""The conditions schedule: `tc class change` of just what a step changes, at scaled times."""

from __future__ import annotations

from testbed.clock import ScenarioClock
from testbed.config import load_testbed
from testbed.config.conditions import ConditionsSpec, ConditionStep
from testbed.net.conditions import schedule, shapers_at
from testbed.net.shaping import ue_shapes
from testbed.net.topology import Topology


def _spec(steps, **target):
    spec = load_testbed()
    trace = ConditionsSpec(trace="inline", steps=[ConditionStep(**s) for s in steps], **target)
    return spec.model_copy(update={"link": spec.link.model_copy(update={"conditions": [trace]})})


def _ues(spec):
    return ue_shapes(spec, Topology.from_spec(spec).ues)


def test_a_slice_step_changes_its_class_in_both_directions_at_the_scaled_time():
    spec = _spec([{"time_s": 0, "capacity_mbit": 50}, {"time_s": 10, "capacity_mbit": 10}],
                 slice="ai")
    [step] = schedule(spec, _ues(spec), ScenarioClock(4))
    assert (step["at_s"], step["time_s"]) == (2.5, 10)
    # the slice's guarantee falls to 10 with its ceiling, and unsliced traffic's rate takes the rest
    assert [" ".join(c) for c in step["commands"]] == [
        f"tc class change dev {dev} parent 1:1 classid {cls} htb rate {rate} ceil {ceil} quantum 1514"
        for dev in ("n6", "n3") for cls, rate, ceil in (("1:100", "10000kbit", "10000kbit"),
                                                         ("1:ff", "90000kbit", "100000kbit"))]
    up, _ = shapers_at(spec, _ues(spec), 0)
    assert up.classes[0].ceil_mbit == 50  # what `up` builds


def test_a_ue_group_trace_gives_its_ues_leaves_from_the_start_and_changes_their_ambr():
    spec = _spec([{"time_s": 0, "capacity_mbit": 1000}, {"time_s": 1, "capacity_mbit": 2}],
                 ue_group="ai")
    up, down = shapers_at(spec, _ues(spec), 0)
    assert [u.ue.group for u in up.ue_classes] == ["ai", "ai"]  # 1000 binds nothing, yet a leaf
    assert [u.ue.group for u in down.ue_classes] == ["ai", "ai"]
    [step] = schedule(spec, _ues(spec))
    changed = [c[c.index("classid") + 1] + " " + c[c.index("ceil") + 1] for c in step["commands"]]
    assert changed == ["1:4000 2000kbit", "1:4001 2000kbit"] * 2


def test_a_link_step_keeps_the_guarantees_inside_the_new_capacity():
    spec = _spec([{"time_s": 0, "capacity_mbit": 100}, {"time_s": 5, "capacity_mbit": 10}])
    up, _ = shapers_at(spec, _ues(spec), 5)
    assert {c.slice: (c.rate_mbit, c.ceil_mbit) for c in up.classes} == {
        "ai": (10, 10), "be": (0, 10), "-": (0, 10)}


def test_loss_steps_replace_one_filter_per_trace():
    spec = _spec([{"time_s": 0, "loss": 0.0}, {"time_s": 2, "loss": 0.5}], slice="be")
    [step] = schedule(spec, _ues(spec))
    [f] = step["commands"]
    assert f[:12] == ["tc", "filter", "replace", "dev", "n6", "parent", "1:", "prio", "1",
                      "handle", "16", "protocol"]
    assert f"37 0 1 {2**31}" in f[f.index("bytecode") + 1]  # half the draws above the threshold


def test_an_ambr_that_binds_only_after_a_link_step_has_its_leaf_from_the_start():
    """ai's AMBR of 50 binds nothing on the 100 Mbit/s link, and does once the link falls to 30:
    its UEs have leaves from time 0 on, so each step only changes classes."""
    spec = _spec([{"time_s": 0, "capacity_mbit": 100}, {"time_s": 5, "capacity_mbit": 30}])
    ai = spec.ue_groups[0].model_copy(update={"ambr_uplink_mbit": 50.0})
    spec = spec.model_copy(update={"ue_groups": [ai, spec.ue_groups[1]]})
    up, down = shapers_at(spec, _ues(spec), 0)
    assert [(u.ue.group, u.ceil_mbit) for u in up.ue_classes] == [("ai", 50), ("ai", 50)]
    assert down.ue_classes == []  # its downlink AMBR (1000) binds at no step
    [step] = schedule(spec, _ues(spec))
    assert all(c[2] == "change" for c in step["commands"])
    assert "classid 1:4000 htb rate 8kbit ceil 30000kbit prio 7" in " ".join(
        next(c for c in step["commands"] if "1:4000" in c))
