"""Replay a testbed's conditions traces: `tc class change`, loss filters and netem delays on schedule.

`shapers_at(spec, ues, t)` is the HTB trees as they stand at scenario time `t` of the traces
(`link.conditions`: the link's capacity, a slice's ceiling, a UE group's AMBR, each target's uplink
loss, the link's delay); `schedule` lists, per step, the `tc` commands that turn the trees of the
step before into those of this one (classes and leaf queues changed in place, loss filters
replaced), at wall-clock offsets divided by the time scale. `LocalTestbed.up` builds the trees
at time 0 and starts `python -m testbed.net.conditions LOG` in the UPF's namespace with the
schedule on its stdin: it sleeps to each step, runs its commands in one `tc -batch`, and appends
what it applied (with the time) to LOG. It ends after the last step, or when `tc` fails (the
namespace was removed); `teardown` kills it with the namespace's processes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from testbed.clock import REAL_TIME, ScenarioClock
from testbed.config import TestbedSpec
from testbed.config.conditions import ConditionsSpec
from testbed.net.shaping import _NET, _RANDOM, LOSS_CLASS, Shaper, UEShape, shapers_for, tc_batch
from testbed.net.topology import N3, N6

LOSS_HANDLE = 0x10  # trace k's loss filter: handle LOSS_HANDLE + k, prio 1, before every class


LeafGroups = tuple[frozenset[str], frozenset[str]]  # the groups with leaves: uplink, downlink


def shapers_at(spec: TestbedSpec, ues: tuple[UEShape, ...], t: float,
               leaf_groups: LeafGroups | None = None) -> list[Shaper]:
    """The uplink (N6) and downlink (N3) trees with every conditions trace at scenario time `t`.
    Every tree of a run has the same shape: in each direction, the UE groups with a leaf at any
    step of the traces have one at every step (`leaf_groups`, computed when None)."""
    if leaf_groups is None:
        leaf_groups = _leaf_groups(spec, ues)
    return _trees(spec, ues, t, leaf_groups)


def _leaf_groups(spec: TestbedSpec, ues: tuple[UEShape, ...]) -> LeafGroups:
    """Per direction, the UE groups a trace names, and those whose UEs have a leaf at some step
    (an AMBR that binds once a link or slice trace lowers the ceiling); none without traces."""
    if not spec.link.conditions:
        return frozenset(), frozenset()
    named = frozenset(c.ue_group for c in spec.link.conditions if c.ue_group is not None)
    times = sorted({0.0} | {s.time_s for c in spec.link.conditions for s in c.steps})
    up, down = set(named), set(named)
    for t in times:
        tree_up, tree_down = _trees(spec, ues, t, (named, named))
        up |= {u.ue.group for u in tree_up.ue_classes}
        down |= {u.ue.group for u in tree_down.ue_classes}
    return frozenset(up), frozenset(down)


def _trees(spec: TestbedSpec, ues: tuple[UEShape, ...], t: float,
           groups: LeafGroups) -> list[Shaper]:
    link, slices, ues = spec.link, list(spec.slices), list(ues)
    for c in link.conditions:
        cap = c.at(t).capacity_mbit
        if c.slice is not None and cap is not None:
            slices = [s.model_copy(update={"ceiling_mbit": cap,
                                           "guaranteed_mbit": min(s.guaranteed_mbit, cap)})
                      if s.name == c.slice else s for s in slices]
        elif c.ue_group is not None and cap is not None:
            ues = [UEShape(u.address, u.slice, u.group, cap, cap, u.five_qi)
                   if u.group == c.ue_group else u for u in ues]
        elif c.slice is None and c.ue_group is None:
            if cap is not None:
                total = sum(s.guaranteed_mbit for s in slices)
                scale = min(1.0, cap / total) if total else 1.0  # guarantees fit the link
                slices = [s.model_copy(update={
                    "guaranteed_mbit": s.guaranteed_mbit * scale,
                    "ceiling_mbit": None if s.ceiling_mbit is None else min(s.ceiling_mbit, cap)})
                    for s in slices]
                link = link.model_copy(update={"capacity_mbit": cap, "uplink_mbit": None,
                                               "downlink_mbit": None})
            if c.at(t).delay_ms is not None:
                link = link.model_copy(update={"delay_ms": c.at(t).delay_ms})
    lossy = any(s.loss is not None for c in link.conditions for s in c.steps)
    if lossy and any(c.target == "link" for c in link.conditions):
        link = link.model_copy(update={"uplink_loss": 0.0})  # the link's trace's filter has it
    netem = any(s.delay_ms is not None for c in link.conditions for s in c.steps)
    return [Shaper(s.device, s.direction, s.link, s.slices, s.ues, leaf_groups=g,
                   loss_class=lossy, netem=netem)
            for s, g in zip(shapers_for(link, slices, n3=N3, n6=N6, ues=tuple(ues)), groups,
                            strict=True)]


def loss_filter(device: str, k: int, c: ConditionsSpec, loss: float,
                addresses: Iterable[str]) -> list[str]:
    """Trace `k`'s uplink loss filter on `device` (`tc filter replace`: it adds or swaps): a
    classic-BPF program that sends a packet of its target (every packet for the link, a source in
    the slice's subnet, or one of the UE group's `addresses`) to the loss class with probability
    `loss`, and passes the rest to the filters after it."""
    keep_below = min(round((1 - loss) * 2**32), 0xFFFFFFFF)
    # A = random; above the threshold: lost (the filter's flowid), else passed on
    draw = [(0x20, 0, 0, _RANDOM), (0x25, 0, 1, keep_below), (0x06, 0, 0, 0xFFFFFFFF),
            (0x06, 0, 0, 0)]
    head: list[tuple[int, int, int, int]] = []
    if c.slice is not None:  # A = source & mask; not the slice's network: to the final "return 0"
        [cidr] = list(addresses)
        net, bits = cidr.split("/")
        mask = (0xFFFFFFFF << (32 - int(bits))) & 0xFFFFFFFF
        head = [(0x20, 0, 0, _NET + 12), (0x54, 0, 0, mask), (0x15, 0, 3, _addr(net) & mask)]
    elif c.ue_group is not None:  # the group's addresses as ranges: lo <= A <= hi, one by one
        ranges = _ranges(sorted(_addr(a) for a in addresses))
        head = [(0x20, 0, 0, _NET + 12)]
        for r, (lo, hi) in enumerate(ranges):
            last = r == len(ranges) - 1
            after = 2 * (len(ranges) - 1 - r)  # the compares after this range's two
            if after > 255:
                raise ValueError(f"UE group {c.ue_group}'s addresses make more than 128 ranges: "
                                 "too many for one loss filter")
            head += [(0x35, 0, 4 if last else 1, lo),  # A < lo: the next range, or "return 0"
                     (0x25, 3 if last else 0, after, hi)]  # A > hi: the same; else the draw
    prog = [*head, *draw]
    code = ",".join([str(len(prog))] + [" ".join(map(str, op)) for op in prog])
    return ["tc", "filter", "replace", "dev", device, "parent", "1:", "prio", "1", "handle",
            str(LOSS_HANDLE + k), "protocol", "ip", "bpf", "bytecode", code, "flowid", LOSS_CLASS]


def _ranges(addrs: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a in addrs:
        if out and a == out[-1][1] + 1:
            out[-1] = (out[-1][0], a)
        else:
            out.append((a, a))
    return out


def _addr(dotted: str) -> int:
    return int.from_bytes(bytes(int(b) for b in dotted.split(".")), "big")


def _losses(spec: TestbedSpec, ues: tuple[UEShape, ...], t: float, device: str) -> list[list[str]]:
    """Every lossy trace's filter at time `t` (the link's own uplink_loss where its trace has
    none yet)."""
    out = []
    for k, c in enumerate(spec.link.conditions):
        if not any(s.loss is not None for s in c.steps):
            continue
        loss = c.at(t).loss
        if loss is None:
            loss = spec.link.uplink_loss if c.target == "link" else 0.0
        if c.slice is not None:
            where: list[str] = [str(spec.slice(c.slice).subnet)]
        else:
            where = [u.address for u in ues if u.group == c.ue_group]
        out.append(loss_filter(device, k, c, loss, where))
    return out


def changes(old: Shaper, new: Shaper) -> list[list[str]]:
    """`tc class change` and `tc qdisc change` for each class and leaf queue whose parameters
    differ between two trees of the same shape."""
    def keyed(s: Shaper) -> dict[tuple[str, str], list[str]]:
        out = {}
        for cmd in s.commands():
            if cmd[1] == "class":
                out[("class", cmd[cmd.index("classid") + 1])] = cmd
            elif cmd[1] == "qdisc" and "parent" in cmd:
                out[("qdisc", cmd[cmd.index("parent") + 1])] = cmd
        return out

    before, after = keyed(old), keyed(new)
    if before.keys() != after.keys():
        raise ValueError("a conditions step changed the shape of the HTB tree")
    return [[c[0], c[1], "change", *c[3:]] for k, c in after.items() if c != before[k]]


def schedule(spec: TestbedSpec, ues: tuple[UEShape, ...], clock: ScenarioClock = REAL_TIME,
             first: list[Shaper] | None = None) -> list[dict[str, Any]]:
    """The steps after time 0: per step, its wall-clock offset from `up` (`at_s`, its scenario time on
    `clock`), its scenario time and the `tc` commands that apply it. `first`: the trees at
    time 0 (`shapers_at(spec, ues, 0)`), where the caller has them."""
    times = sorted({s.time_s for c in spec.link.conditions for s in c.steps if s.time_s > 0})
    out = []
    groups = _leaf_groups(spec, ues)
    prev = first if first is not None else shapers_at(spec, ues, 0.0, groups)
    for t in times:
        now = shapers_at(spec, ues, t, groups)
        cmds = [cmd for a, b in zip(prev, now, strict=True) for cmd in changes(a, b)]
        cmds += _losses(spec, ues, t, now[0].device)
        out.append({"at_s": clock.wall(t), "time_s": t, "commands": cmds,
                    "values": {c.target: c.at(t).model_dump(exclude={"time_s"})
                               for c in spec.link.conditions}})
        prev = now
    return out


def initial_losses(spec: TestbedSpec, ues: tuple[UEShape, ...]) -> list[list[str]]:
    """The lossy traces' filters at time 0 (on the uplink tree's N6), installed with the trees."""
    return _losses(spec, ues, 0.0, N6)


def main(argv: list[str] | None = None) -> int:
    """Replay the schedule on stdin (JSON, `schedule`'s), logging each step applied to LOG."""
    parser = argparse.ArgumentParser(prog="python -m testbed.net.conditions", description=__doc__)
    parser.add_argument("log", type=Path, help="a JSON line per step applied (time, values)")
    args = parser.parse_args(argv)
    t0 = time.time()
    steps = json.loads(sys.stdin.read())
    for step in steps:
        time.sleep(max(0.0, t0 + step["at_s"] - time.time()))
        done = subprocess.run(["tc", "-batch", "-"], input=tc_batch(step["commands"]),
                              capture_output=True, text=True, check=False)
        with args.log.open("a") as log:
            log.write(json.dumps({"t": time.time(), "time_s": step["time_s"],
                                  "values": step["values"], "ok": done.returncode == 0}) + "\n")
        if done.returncode != 0:
            print(f"conditions: tc failed: {done.stderr.strip()}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
