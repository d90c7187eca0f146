"""Slice shaping: one HTB tree per direction of the bottleneck, one class per slice.

A `Shaper` is plain data that lists the `tc` commands for one interface. Uplink shaping sits on
the UPF's N6 side and classifies by source subnet; downlink shaping sits on the UPF's N3 bridge
and classifies by destination subnet. Each slice class is guaranteed its reservation and may
borrow up to its ceiling (or the link capacity); unsliced traffic falls into a default class.
With slicing off, every packet shares one class: the "no slice" baseline of Fig 5.7/5.8.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from testbed.config import LinkSpec, SliceSpec

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


def flow_bucket(port: int, queues: int) -> int:
    """The flow queue a UE's port hashes to: its bits 1..log2(queues), as the u32 mask of
    `Shaper._flow_queues` takes them (tests/net/test_shaping.py holds the two together)."""
    return (port >> 1) & (queues - 1)


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

    @property
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
        lossy = self.direction == "uplink" and self.link.uplink_loss > 0
        if lossy:
            cmds += self._loss()  # its filter first (prio 1): the slices' filters come after it
        fq = self.link.flow_queues
        tables = 0  # flow queue sets so far: each has its own hash table and leaf numbers
        for c in self.classes:
            cmds.append(["tc", "class", "add", "dev", dev, "parent", ROOT_CLASS, "classid",
                         c.classid, "htb", "rate", _kbit(c.rate_mbit), "ceil", _kbit(c.ceil_mbit),
                         "quantum", str(QUANTUM)])
            if fq:
                sets = self._flow_queue_sets(c)
                for t, subnet in enumerate(sets, start=tables):
                    cmds += self._flow_queues(t, c, subnet, len(sets))
                tables += len(sets)
            else:
                cmds.append(["tc", "qdisc", "add", "dev", dev, "parent", c.classid, "handle",
                             c.leaf_handle, *self._leaf()])
            if c.slice != "-":
                cmds.append(["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip",
                             "prio", str(1 + lossy), "u32", "match", "ip", key, c.match,
                             "flowid", c.classid])
            elif fq:
                # HTB's `default` must be a leaf: the default class is an inner one here, so a
                # catch-all filter after the slices' sends the rest to it
                cmds.append(["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip",
                             "prio", str(2 + lossy), "u32", "match", "u32", "0", "0",
                             "flowid", c.classid])
        return cmds

    def _loss(self) -> list[list[str]]:
        """Each packet lost with probability `link.uplink_loss`, before any slice's class."""
        dev = self.device
        keep_below = round((1 - self.link.uplink_loss) * 2**32)
        program = f"4,32 0 0 {_RANDOM},37 0 1 {keep_below},6 0 0 4294967295,6 0 0 0"
        return [
            ["tc", "class", "add", "dev", dev, "parent", "1:", "classid", LOSS_CLASS, "htb",
             "rate", _kbit(0), "quantum", str(QUANTUM)],
            ["tc", "qdisc", "add", "dev", dev, "parent", LOSS_CLASS, "handle", "fe:", "pfifo",
             "limit", "0"],
            ["tc", "filter", "add", "dev", dev, "parent", "1:", "prio", "1", "protocol", "ip",
             "bpf", "bytecode", program, "flowid", LOSS_CLASS],
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
                     sets: int) -> list[list[str]]:
        """Flow queue set `t` of class `c`: `flow_queues` leaves under `c`, one per hash bucket
        of the UE's port (the source port uplink, the destination port downlink: bytes 20-23 of
        an option-less IPv4 packet hold the TCP/UDP ports), for the packets of UEs in `subnet`
        (None: every packet of the class not taken by another set). HTB serves borrowing leaves
        round robin with equal quanta, so each flow gets an equal share and a small flow never
        waits behind a bulk one's queue — what sfq or fq_codel would do."""
        dev, n = self.device, self.link.flow_queues
        table = f"{t + 2:x}:"
        # the port's bits 1..log2(n), not 0..: Linux's connect() takes even ports, so bit 0 is
        # always 0 and half the buckets would never be used (u32 shifts by the mask's lowest bit)
        mask = f"0x{(n - 1) << 17:08x}" if self.direction == "uplink" else f"0x{(n - 1) << 1:08x}"
        cmds = [["tc", "filter", "add", "dev", dev, "parent", c.classid, "prio", "1", "handle",
                 table, "protocol", "ip", "u32", "divisor", str(n)]]
        for i in range(n):
            minor = 0x1000 + t * 0x100 + i
            child = f"1:{minor:x}"
            cmds.append(["tc", "class", "add", "dev", dev, "parent", c.classid, "classid", child,
                         "htb", "rate", _kbit(c.rate_mbit / (n * sets)), "ceil",
                         _kbit(c.ceil_mbit), "quantum", str(QUANTUM)])
            cmds.append(["tc", "qdisc", "add", "dev", dev, "parent", child, "handle",
                         f"{minor:x}:", *self._flow_queue_leaf()])
            cmds.append(["tc", "filter", "add", "dev", dev, "parent", c.classid, "prio", "1",
                         "protocol", "ip", "u32", "ht", f"{table}{i:x}:", "match", "u32", "0",
                         "0", "flowid", child])
        match = ["match", "u32", "0", "0"] if subnet is None else ["match", "ip", self._key, subnet]
        cmds.append(["tc", "filter", "add", "dev", dev, "parent", c.classid, "prio", "1",
                     "protocol", "ip", "u32", *match, "hashkey", "mask", mask, "at", "20",
                     "link", table])
        return cmds

    def _flow_queue_leaf(self) -> list[str]:
        if self.link.flow_queue_bytes is not None:
            return ["bfifo", "limit", str(self.link.flow_queue_bytes)]
        return [FLOW_QUEUE_QDISC[self.link.flow_queue_drop], "limit", str(self.link.flow_queue_limit)]

    def batch(self) -> str:
        """The same commands as one `tc -batch` script (hundreds of classes with flow queues)."""
        def word(arg: str) -> str:  # tc's batch reader takes a double-quoted word whole
            return f'"{arg}"' if " " in arg else arg

        return "".join(" ".join(word(a) for a in cmd[1:]) + "\n" for cmd in self.commands())

    def _leaf(self) -> list[str]:
        limit = str(self.link.queue_packets)
        if self.link.delay_ms > 0:
            return ["netem", "delay", f"{self.link.delay_ms:g}ms", "limit", limit]
        return ["pfifo", "limit", limit]


def shapers_for(link: LinkSpec, slices: list[SliceSpec], *, n3: str, n6: str) -> list[Shaper]:
    return [Shaper(n6, "uplink", link, tuple(slices)), Shaper(n3, "downlink", link, tuple(slices))]
