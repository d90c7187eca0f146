"""Slice shaping: one HTB tree per direction of the bottleneck, one class per slice.

A `Shaper` is plain data that lists the `tc` commands for one interface. Uplink shaping sits on
the UPF's N6 side and classifies by source subnet; downlink shaping sits on the UPF's N3 bridge
and classifies by destination subnet. Each slice class is guaranteed its reservation and may
borrow up to its ceiling (or the link capacity); unsliced traffic falls into a default class.
With slicing off, every packet shares one class: the "no slice" baseline of Fig 5.7/5.8.

A UE with something to enforce (a group AMBR below its class's ceiling in that direction, or a
5QI whose priority differs from 5QI 9's) gets a leaf of its own under the class that carries its
slice, ceiling at its AMBR and HTB `prio` from its 5QI's priority level. HTB lends spare
bandwidth to the lowest prio first, at every level of the tree, so in a tree with UE leaves every
other leaf (flow queues, a class's leaf for its other UEs, a slice or default class that is a leaf
itself) carries the prio of the 5QI its UEs have, 5QI 9's: a better 5QI then borrows before 5QI 9
traffic anywhere on the link, and never after it. A u32 hash table keyed on the last
octet of the UE's address finds a UE's leaf, so a packet costs about the same at 1,000 UEs as
at 10 (at most ceil(UEs / 256) keys to compare).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from testbed.config import LinkSpec, SliceSpec, TestbedSpec
from testbed.config.fiveqi import DEFAULT_FIVE_QI, priority_level

Direction = Literal["uplink", "downlink"]

ROOT_CLASS = "1:1"
DEFAULT_MINOR = 0xFF
MIN_RATE_KBIT = 8  # HTB needs a positive rate: a best-effort slice gets this and borrows the rest
QUANTUM = 1514  # equal quanta: excess bandwidth is shared evenly between borrowing classes
FLOW_QUEUE_QDISC = {"tail": "pfifo", "head": "pfifo_head_drop"}  # by link.flow_queue_drop
LOSS_CLASS = "1:fe"  # where link.uplink_loss sends the packets it draws: a queue of length 0
# classic BPF: A = a random u32 (the ancillary load SKF_AD_OFF + SKF_AD_RANDOM); above the
# threshold the filter matches (returns -1: its flowid, the loss class), else passes (0)
_RANDOM = 0xFFFFF000 + 56


UE_TABLE = "400:"  # the u32 hash table (keyed on the UE address's last octet) of UE leaves
UE_MINOR = 0x4000  # UE leaf i is class 1:(UE_MINOR + i), its FIFO handle (UE_MINOR + i):
REST_MINOR = 0x200  # class i's leaf for its UEs without a leaf of their own (no flow queues)
_NET = 0xFFF00000  # classic BPF: SKF_NET_OFF, loads relative to the IP header
_GOLDEN = 0x9E3779B1  # Fibonacci hashing's multiplier: the top bits of port * it spread evenly


def flow_bucket(port: int, queues: int, salt: int | None = None) -> int:
    """The flow queue a UE's port hashes to. Without a salt (a fixed hash): its bits
    1..log2(queues), as the u32 mask of `Shaper._flow_queues` takes them. With one (the hash
    `link.flow_queue_perturb_s` re-draws): the top log2(queues) bits of (port ^ salt) * _GOLDEN
    mod 2^32, as the classic-BPF filter computes them (tests/net/test_shaping.py holds each rule
    and its filter together)."""
    if salt is None:
        return (port >> 1) & (queues - 1)
    return (((port ^ salt) * _GOLDEN) & 0xFFFFFFFF) >> (32 - (queues.bit_length() - 1))


def htb_prio(five_qi: int) -> int:
    """HTB's `prio` (0 served first, 7 last) for a 5QI: its priority level (5-90, lower first)
    in eight bands of 12 levels: 5QI 69 and 5 -> 0, 5QI 1 -> 1, 5QI 6 -> 4, 5QI 9 -> 7."""
    return min(7, (priority_level(five_qi) - 1) // 12)


@dataclass(frozen=True)
class UEShape:
    """What the shaper needs of one UE: where it is and what its group's QoS asks for."""

    address: str
    slice: str
    group: str
    ambr_uplink_mbit: float
    ambr_downlink_mbit: float
    five_qi: int = DEFAULT_FIVE_QI

    def ambr_mbit(self, direction: Direction) -> float:
        return self.ambr_uplink_mbit if direction == "uplink" else self.ambr_downlink_mbit


@dataclass(frozen=True)
class UEClass:
    """The HTB leaf of one UE in one direction, under the class of its slice."""

    ue: UEShape
    parent: str
    classid: str
    leaf_handle: str
    ceil_mbit: float
    prio: int


def tc_batch(cmds: list[list[str]]) -> str:
    """`tc` commands as one `tc -batch` script (each without its leading "tc")."""
    def word(arg: str) -> str:  # tc's batch reader takes a double-quoted word whole
        return f'"{arg}"' if " " in arg else arg

    return "".join(" ".join(word(a) for a in cmd[1:]) + "\n" for cmd in cmds)


def _kbit(mbit: float) -> str:
    return f"{max(round(mbit * 1000), MIN_RATE_KBIT)}kbit"


@dataclass(frozen=True)
class SliceClass:
    """The HTB class (and its leaf queue) that carries one slice in one direction."""

    slice: str
    classid: str
    leaf_handle: str
    rate_mbit: float
    ceil_mbit: float
    match: str  # subnet in CIDR form


@dataclass(frozen=True)
class Shaper:
    device: str
    direction: Direction
    link: LinkSpec
    slices: tuple[SliceSpec, ...]
    ues: tuple[UEShape, ...] = ()
    enforce_ambr: bool = True  # False on the lab, whose gNB polices AMBR: 5QI priority only
    # a conditions trace's needs (testbed.net.conditions): these groups' UEs get a leaf whatever
    # their AMBR (a trace changes it), the loss class exists without link.uplink_loss (a trace's
    # filters send to it), and leaves are netem even at 0 ms (a trace changes their delay)
    leaf_groups: frozenset[str] = frozenset()
    loss_class: bool = False
    netem: bool = False

    @functools.cached_property
    def classes(self) -> list[SliceClass]:
        """Slice classes first, then the default class (slice name '-')."""
        cap = self.link.rate_mbit(self.direction)
        out: list[SliceClass] = []
        if self.link.slicing:
            for i, s in enumerate(self.slices):
                out.append(SliceClass(s.name, f"1:{0x100 + i:x}", f"{0x10 + i:x}:",
                                      s.guaranteed_mbit, s.ceiling_mbit or cap, str(s.subnet)))
            rest = max(cap - sum(s.guaranteed_mbit for s in self.slices), 0.0)
        else:
            rest = cap
        out.append(SliceClass("-", f"1:{DEFAULT_MINOR:x}", "ff:", rest, cap, "0.0.0.0/0"))
        return out

    @functools.cached_property
    def ue_classes(self) -> list[UEClass]:
        """The UEs that get a leaf of their own in this direction (`UEShape`s with an AMBR below
        their class's ceiling, or a 5QI whose HTB prio is not 5QI 9's), in the order given."""
        by_slice = {c.slice: c for c in self.classes}
        default = htb_prio(DEFAULT_FIVE_QI)
        out: list[UEClass] = []
        for ue in self.ues:
            c = by_slice.get(ue.slice if self.link.slicing else "-", by_slice["-"])
            ambr = ue.ambr_mbit(self.direction) if self.enforce_ambr else c.ceil_mbit
            prio = htb_prio(ue.five_qi)
            if ambr >= c.ceil_mbit and prio == default and ue.group not in self.leaf_groups:
                continue
            minor = UE_MINOR + len(out)
            out.append(UEClass(ue, c.classid, f"1:{minor:x}", f"{minor:x}:",
                               min(ambr, c.ceil_mbit), prio))
        return out

    def commands(self) -> list[list[str]]:
        """`tc` commands (without the namespace wrapper) that install the tree on `device`."""
        dev = self.device
        cap = _kbit(self.link.rate_mbit(self.direction))
        cmds = [
            ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb",
             "default", f"{DEFAULT_MINOR:x}"],
            ["tc", "class", "add", "dev", dev, "parent", "1:", "classid", ROOT_CLASS, "htb",
             "rate", cap, "ceil", cap, "quantum", str(QUANTUM)],
        ]
        key = self._key
        lossy = self.direction == "uplink" and (self.link.uplink_loss > 0 or self.loss_class)
        if lossy:
            cmds += self._loss()  # its filter first (prio 1): the slices' filters come after it
        ue_classes = self.ue_classes
        first = 1 + lossy + bool(ue_classes)  # the slices' filters' prio: after the UEs' hash
        fq = self.link.flow_queues
        # HTB's prio orders borrowing from every ancestor, the root's spare bandwidth included:
        # beside UE leaves every other leaf of the tree is 5QI 9 traffic and says so (a leaf
        # without a prio is HTB's 0, ahead of every 5QI: a better 5QI then borrowed last)
        shared = htb_prio(DEFAULT_FIVE_QI) if ue_classes else None
        tables = 0  # flow queue sets so far: each has its own hash table and leaf numbers
        for i, c in enumerate(self.classes):
            kids = [u for u in ue_classes if u.parent == c.classid]
            leaf = not fq and not kids  # the class holds its queue itself
            cmds.append(["tc", "class", "add", "dev", dev, "parent", ROOT_CLASS, "classid",
                         c.classid, "htb", "rate", _kbit(c.rate_mbit), "ceil", _kbit(c.ceil_mbit),
                         *(("prio", str(shared)) if leaf and shared is not None else ()),
                         "quantum", str(QUANTUM)])
            if fq:
                sets = self._flow_queue_sets(c)
                for t, subnet in enumerate(sets, start=tables):
                    cmds += self._flow_queues(t, c, subnet, len(sets), prio=shared)
                tables += len(sets)
            elif kids:
                cmds += self._rest(i, c, htb_prio(DEFAULT_FIVE_QI))
            else:
                cmds.append(["tc", "qdisc", "add", "dev", dev, "parent", c.classid, "handle",
                             c.leaf_handle, *self._leaf()])
            for u in kids:
                cmds.append(["tc", "class", "add", "dev", dev, "parent", c.classid, "classid",
                             u.classid, "htb", "rate", _kbit(0), "ceil", _kbit(u.ceil_mbit),
                             "prio", str(u.prio), "quantum", str(QUANTUM)])
                cmds.append(["tc", "qdisc", "add", "dev", dev, "parent", u.classid, "handle",
                             u.leaf_handle, *self._leaf()])
            if c.slice != "-":
                cmds.append(["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip",
                             "prio", str(first), "u32", "match", "ip", key, c.match,
                             "flowid", c.classid])
            elif fq or kids:
                # HTB's `default` must be a leaf: the default class is an inner one here, so a
                # catch-all filter after the slices' sends the rest to it
                cmds.append(["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip",
                             "prio", str(first + 1), "u32", "match", "u32", "0", "0",
                             "flowid", c.classid])
        return cmds + self._ue_filters(ue_classes, prio=1 + lossy)

    def _rest(self, i: int, c: SliceClass, prio: int) -> list[list[str]]:
        """Class `c`'s leaf for the packets of UEs without a leaf of their own, and the filter
        (under `c`) that sends them there: without flow queues, `c` became an inner class."""
        dev, minor = self.device, REST_MINOR + i
        return [
            ["tc", "class", "add", "dev", dev, "parent", c.classid, "classid", f"1:{minor:x}",
             "htb", "rate", _kbit(0), "ceil", _kbit(c.ceil_mbit), "prio", str(prio),
             "quantum", str(QUANTUM)],
            ["tc", "qdisc", "add", "dev", dev, "parent", f"1:{minor:x}", "handle", f"{minor:x}:",
             *self._leaf()],
            ["tc", "filter", "add", "dev", dev, "parent", c.classid, "prio", "1", "protocol",
             "ip", "u32", "match", "u32", "0", "0", "flowid", f"1:{minor:x}"],
        ]

    def _ue_filters(self, ue_classes: list[UEClass], *, prio: int) -> list[list[str]]:
        """A u32 hash table of 256 buckets at the root, keyed on the last octet of the UE's
        address (source uplink, destination downlink), one key per UE leaf in its bucket, and
        the filter that hashes every packet into it; a packet of no listed UE falls through to
        the slices' filters."""
        if not ue_classes:
            return []
        dev, at = self.device, "12" if self.direction == "uplink" else "16"
        head = ["tc", "filter", "add", "dev", dev, "parent", "1:", "prio", str(prio),
                "protocol", "ip", "u32"]
        cmds = [[*head[:9], "handle", UE_TABLE, *head[9:], "divisor", "256"]]
        for u in ue_classes:
            octet = int(u.ue.address.rsplit(".", 1)[1])
            cmds.append([*head, "ht", f"{UE_TABLE}{octet:x}:", "match", "ip", self._key,
                         f"{u.ue.address}/32", "flowid", u.classid])
        cmds.append([*head, "match", "u32", "0", "0", "hashkey", "mask", "0x000000ff", "at", at,
                     "link", UE_TABLE])
        return cmds

    def _loss(self) -> list[list[str]]:
        """Each packet lost with probability `link.uplink_loss`, before any slice's class."""
        dev = self.device
        keep_below = round((1 - self.link.uplink_loss) * 2**32)
        program = f"4,32 0 0 {_RANDOM},37 0 1 {keep_below},6 0 0 4294967295,6 0 0 0"
        filters = [["tc", "filter", "add", "dev", dev, "parent", "1:", "prio", "1", "protocol", "ip",
                    "bpf", "bytecode", program, "flowid", LOSS_CLASS]]
        return [
            ["tc", "class", "add", "dev", dev, "parent", "1:", "classid", LOSS_CLASS, "htb",
             "rate", _kbit(0), "quantum", str(QUANTUM)],
            ["tc", "qdisc", "add", "dev", dev, "parent", LOSS_CLASS, "handle", "fe:", "pfifo",
             "limit", "0"],
            *(filters if self.link.uplink_loss > 0 else []),
        ]

    @property
    def _key(self) -> str:
        """The UE's end of a packet: its source uplink, its destination downlink."""
        return "src" if self.direction == "uplink" else "dst"

    def _flow_queue_sets(self, c: SliceClass) -> list[str | None]:
        """The UE subnets that get their own set of flow queues in class `c` (None: the rest).
        Per slice, a class that carries several slices (the default class with slicing off)
        gets one set per slice and one for the rest; a slice's own class carries one slice."""
        if self.link.flow_queue_sets == "per-slice" and c.slice == "-" and not self.link.slicing:
            return [str(s.subnet) for s in self.slices] + [None]
        return [None]

    def _flow_queues(self, t: int, c: SliceClass, subnet: str | None,
                     sets: int, *, prio: int | None = None) -> list[list[str]]:
        """Flow queue set `t` of class `c`: `flow_queues` leaves under `c`, one per hash bucket
        of the UE's port (the source port uplink, the destination port downlink: bytes 20-23 of
        an option-less IPv4 packet hold the TCP/UDP ports), for the packets of UEs in `subnet`
        (None: every packet of the class not taken by another set). HTB serves borrowing leaves
        round robin with equal quanta, so each flow gets an equal share and a small flow never
        waits behind a bulk one's queue — what sfq or fq_codel would do. With `prio` (the class
        has UE leaves too) each leaf borrows the class's rate at that HTB prio instead of holding
        a share of it."""
        dev, n = self.device, self.link.flow_queues
        salted = self.link.flow_queue_perturb_s is not None  # a program hashes, not u32 tables
        table = f"{t + 2:x}:"
        # the port's bits 1..log2(n), not 0..: Linux's connect() takes even ports, so bit 0 is
        # always 0 and half the buckets would never be used (u32 shifts by the mask's lowest bit)
        mask = f"0x{(n - 1) << 17:08x}" if self.direction == "uplink" else f"0x{(n - 1) << 1:08x}"
        cmds = [] if salted else [["tc", "filter", "add", "dev", dev, "parent", c.classid, "prio",
                                   "1", "handle", table, "protocol", "ip", "u32", "divisor", str(n)]]
        for i in range(n):
            minor = 0x1000 + t * 0x100 + i
            child = f"1:{minor:x}"
            rate = _kbit(c.rate_mbit / (n * sets) if prio is None else 0)
            cmds.append(["tc", "class", "add", "dev", dev, "parent", c.classid, "classid", child,
                         "htb", "rate", rate, "ceil", _kbit(c.ceil_mbit),
                         *(() if prio is None else ("prio", str(prio))), "quantum", str(QUANTUM)])
            cmds.append(["tc", "qdisc", "add", "dev", dev, "parent", child, "handle",
                         f"{minor:x}:", *self._flow_queue_leaf()])
            if not salted:
                cmds.append(["tc", "filter", "add", "dev", dev, "parent", c.classid, "prio", "1",
                             "protocol", "ip", "u32", "ht", f"{table}{i:x}:", "match", "u32",
                             "0", "0", "flowid", child])
        if salted:
            return [*cmds, self.salted_filter(t, c, subnet, salt=0, verb="add")]
        match = ["match", "u32", "0", "0"] if subnet is None else ["match", "ip", self._key, subnet]
        cmds.append(["tc", "filter", "add", "dev", dev, "parent", c.classid, "prio", "1",
                     "protocol", "ip", "u32", *match, "hashkey", "mask", mask, "at", "20",
                     "link", table])
        return cmds

    def salted_filter(self, t: int, c: SliceClass, subnet: str | None, *, salt: int | str,
                      verb: str = "replace") -> list[str]:
        """Flow queue set `t`'s classifier with its hash salted by `salt`: a classic-BPF program
        that (for a packet of a UE in `subnet`) returns the leaf `flow_bucket(port, n, salt)` of
        the set, else 0 (not this set's: the next filter decides). `verb` "replace" re-draws
        the hash of a running tree (`link.flow_queue_perturb_s`). A str salt is written into the
        program as it is: the lab's shell script passes "$salt"."""
        n = self.link.flow_queues
        base = 0x10000 | (0x1000 + t * 0x100)  # classid 1:(0x1000 + t * 0x100 + bucket)
        port_at = 20 if self.direction == "uplink" else 22  # the UE's port: source up, dest down
        prog: list[tuple[int, int, int, int]] = []
        if subnet is not None:
            net, bits = subnet.split("/")
            mask = (0xFFFFFFFF << (32 - int(bits))) & 0xFFFFFFFF
            addr = int.from_bytes(bytes(int(b) for b in net.split(".")), "big") & mask
            ip_at = 12 if self.direction == "uplink" else 16
            prog += [(0x20, 0, 0, _NET + ip_at),  # A = the UE's address
                     (0x54, 0, 0, mask),  # A &= the subnet's mask
                     (0x15, 0, 6, addr)]  # not the subnet: jump to "return 0"
        prog += [(0x28, 0, 0, _NET + port_at),  # A = the UE's port
                 (0xA4, 0, 0, salt),  # A ^= salt
                 (0x24, 0, 0, _GOLDEN),  # A *= golden (mod 2^32)
                 (0x74, 0, 0, 32 - (n.bit_length() - 1)),  # A >>= 32 - log2(n): the bucket
                 (0x04, 0, 0, base),  # A += the set's first leaf
                 (0x16, 0, 0, 0),  # return A: the leaf's classid
                 (0x06, 0, 0, 0)]  # return 0: no match
        code = ",".join([str(len(prog))] + [" ".join(map(str, op)) for op in prog])
        return ["tc", "filter", verb, "dev", self.device, "parent", c.classid,
                "prio", "1" if subnet is not None else "2", "handle", str(t + 1), "protocol", "ip",
                "bpf", "bytecode", code]

    def salted_filters(self, salt: int | str) -> list[list[str]]:
        """Every flow queue set's `salted_filter`, re-drawn with `salt` (`tc filter replace`)."""
        out: list[list[str]] = []
        t = 0
        for c in self.classes:
            sets = self._flow_queue_sets(c)
            out += [self.salted_filter(t + i, c, subnet, salt=salt) for i, subnet in enumerate(sets)]
            t += len(sets)
        return out

    def _flow_queue_leaf(self) -> list[str]:
        if self.link.flow_queue_bytes is not None:
            return ["bfifo", "limit", str(self.link.flow_queue_bytes)]
        return [FLOW_QUEUE_QDISC[self.link.flow_queue_drop], "limit", str(self.link.flow_queue_limit)]

    def batch(self) -> str:
        """The same commands as one `tc -batch` script (hundreds of classes with flow queues)."""
        return tc_batch(self.commands())

    def _leaf(self) -> list[str]:
        limit = str(self.link.queue_packets)
        if self.link.delay_ms > 0 or self.netem:
            return ["netem", "delay", f"{self.link.delay_ms:g}ms", "limit", limit]
        return ["pfifo", "limit", limit]


def ue_shapes(spec: TestbedSpec, ues: Iterable[Any]) -> tuple[UEShape, ...]:
    """`UEShape`s of placed UEs (anything with `group`, `slice` and `address`, such as
    `testbed.net.topology.UE`), their QoS from their group in `spec`."""
    groups = {g.name: g for g in spec.ue_groups}
    return tuple(UEShape(str(u.address), u.slice, u.group, groups[u.group].ambr_uplink_mbit,
                         groups[u.group].ambr_downlink_mbit, groups[u.group].five_qi)
                 for u in ues)


def shapers_for(link: LinkSpec, slices: list[SliceSpec], *, n3: str, n6: str,
                ues: tuple[UEShape, ...] = ()) -> list[Shaper]:
    """The uplink shaper on `n6` and the downlink one on `n3`, with UE leaves for `ues`."""
    return [Shaper(n6, "uplink", link, tuple(slices), ues),
            Shaper(n3, "downlink", link, tuple(slices), ues)]
