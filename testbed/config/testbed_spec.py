"""The testbed file: slices, UE groups and the bottleneck link, as pydantic models."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from testbed.config.conditions import ConditionsSpec
from testbed.config.names import NAME_PATTERN

# Names end up inside namespace and interface names (15-char limit), so keep them short.
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
_SD = re.compile(r"^(0x)?([0-9a-fA-F]{6})$")
_HEX128 = re.compile(r"^[0-9a-fA-F]{32}$")
IMSI_BLOCK = 1000  # default IMSI ranges: group i starts at MSIN i*IMSI_BLOCK + 1 (count <= 1000)


def _digits(value: object, what: str, lengths: tuple[int, ...]) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a quoted string of digits (unquoted, YAML reads it as a "
                         "number and drops leading zeros)")
    if not (value.isascii() and value.isdigit()) or len(value) not in lengths:
        want = " or ".join(str(n) for n in lengths)
        raise ValueError(f"{what} must be {want} digits, got {value!r}")
    return value


class Strict(BaseModel):
    # strict: `sst: true` is not 1, `slicing: "off"` is not a bool, 2.7 is not a count; no NaN/inf
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def _unicast(net: ipaddress.IPv4Network, what: str) -> ipaddress.IPv4Network:
    """A subnet that can hold hosts on a data plane: not loopback, multicast, link-local,
    unspecified or reserved."""
    for flag, name in (("is_loopback", "loopback"), ("is_multicast", "multicast"),
                       ("is_link_local", "link-local"), ("is_unspecified", "unspecified"),
                       ("is_reserved", "reserved")):
        if getattr(net, flag):
            raise ValueError(f"{what} {net} is a {name} range; use a private range such as "
                             "10.45.0.0/24")
    return net


def _ipv4_network(value: object) -> object:
    if isinstance(value, str):
        try:
            return ipaddress.IPv4Network(value, strict=True)
        except ValueError as exc:
            raise ValueError(f"not an IPv4 network in CIDR form: {exc}") from None
    return value


FLOW_QUEUE_PACKETS = 100  # a flow queue's limit unless the testbed file sets one


class LinkSpec(Strict):
    """The bottleneck between the UPF and the data network (N6 uplink, N3 downlink)."""

    capacity_mbit: float = Field(100.0, gt=0, le=100_000)
    # per-direction capacity where the two differ (a radio's uplink is the narrower one);
    # None: capacity_mbit. Slice guarantees and ceilings must fit the narrower direction.
    uplink_mbit: float | None = Field(None, gt=0, le=100_000)
    downlink_mbit: float | None = Field(None, gt=0, le=100_000)
    delay_ms: float = Field(0.0, ge=0, le=10_000)
    queue_packets: int = Field(100, ge=2, le=100_000)  # the FIFO of each class (flow_queues 0)
    # 0: one FIFO per class. N (a power of two up to 256): each class round-robins over N queues
    # hashed on the UE's port (per-flow fairness as sfq/fq_codel or a radio scheduler gives;
    # this kernel has neither qdisc, so it is built from HTB classes)
    flow_queues: int = Field(0, ge=0, le=256)
    # the limit of each flow queue. A shallow per-flow buffer (a radio bearer's, or what
    # fq_codel/sfq leave each of many flows) drops the tail of a bursting upload, and the
    # retransmission costs more round trips the smaller the flow's share: the SLO tail of
    # Fig 5.7 (docs/slicing.md). None: FLOW_QUEUE_PACKETS, deep enough that no upload bursts
    # over it (no tail)
    flow_queue_packets: int | None = Field(None, ge=2, le=100_000)
    # which end of a full flow queue loses the packet: "tail" (the arriving one, as sfq and a
    # plain FIFO) or "head" (the oldest, as fq_codel: the sender learns of the loss from the
    # packets behind it within a round trip instead of a timeout)
    flow_queue_drop: Literal["tail", "head"] = "tail"
    # the limit of each flow queue in bytes instead of packets (a bfifo): at a flow's share of the
    # link a byte limit is a bound on the time a packet waits, which is what CoDel keeps short,
    # so a bulk upload's full-size packets overflow it while a stream of 66-byte ACKs never does
    # (docs/slicing.md). Tail drop only: this kernel has no head-dropping byte FIFO.
    flow_queue_bytes: int | None = Field(None, ge=1514, le=100_000_000)
    # whose flows may hash into one flow queue. "per-class": one set per class for all, as one
    # sfq or fq_codel would: a connection shares a queue with one of N bulk flows with
    # probability 1 - (1 - 1/flow_queues)^N (15 % at 40 flows over 256), which is what gives
    # Fig 5.7's SLO tail here, and moves a TTS mean by up to 30 % in the runs where it hits one
    # of TTS's few connections. "per-slice": each slice's UEs have their own flow_queues queues,
    # also where slices share a class (slicing off), so a UE's connection never queues behind
    # another slice's flow (docs/slicing.md has the figures of both)
    flow_queue_sets: Literal["per-class", "per-slice"] = "per-class"
    # what the stack hands the link's queues. "packet": packets of at most 1514 bytes, each shaped
    # alone, as a radio scheduler sees them. "offload": segmentation offload's super-packets of up to
    # 64 KB, cut into packets after the queues: the emulated path costs a fraction of the CPU per
    # byte (time scale 16 on Table 5.4's busiest window: 64 -> 45 % of 2 cores, the clients' p99
    # lateness 52 -> 11 ms; docs/pace.md), but HTB then releases a 64 KB burst at a time, so only
    # where the link is not what the experiment measures (the SLO runs' 1000 Mbit/s link)
    segmentation: Literal["packet", "offload"] = "packet"
    # re-draw the flow queues' hash every this many seconds, as sfq's `perturb` does: a
    # connection that shares a queue with a bulk flow shares it for at most this long, so over a
    # cell every connection draws many times and the share of requests that land behind a bulk
    # flow is the collision probability, not the luck of a cell's few ports (docs/slicing.md).
    # None: a fixed hash of the port. Locally testbed.net.perturb re-draws it; on the lab, a loop
    # the UPF host's shaping script starts (testbed.lab.shaping_script).
    flow_queue_perturb_s: float | None = Field(None, gt=0, le=3600)
    # the TCP congestion control of every socket in the testbed's namespaces (UEs, UPF, data
    # network). Set, not inherited: a namespace takes the kernel's default, which is CUBIC on
    # most distributions (and on the paper's testbed) but BBR on some, and the two treat a
    # shallow queue differently: CUBIC fills it and loses, BBR paces below it (docs/slicing.md)
    tcp_congestion: Literal["cubic", "reno", "bbr"] | None = None
    # the share of uplink packets lost at random on the way from the UEs (a radio's residual
    # loss, or the drops of the user-space relay UERANSIM puts on the path), each packet alone.
    # This kernel has no netem: a classic-BPF filter sends the drawn packets to a queue of 0.
    uplink_loss: float = Field(0.0, ge=0.0, lt=1.0)
    slicing: bool = True
    # conditions that change during a run: traces of capacity, loss and delay for the link, a
    # slice or a UE group, replayed from `testbed up` on (testbed.config.conditions)
    conditions: list[ConditionsSpec] = Field(default_factory=list)

    @field_validator("flow_queues")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value and value & (value - 1):
            raise ValueError(f"flow_queues must be 0 or a power of two up to 256, got {value}")
        return value

    @field_validator("flow_queue_packets", "flow_queue_drop", "flow_queue_bytes",
                     "flow_queue_sets", "flow_queue_perturb_s")
    @classmethod
    def _needs_flow_queues(cls, value: object, info: ValidationInfo) -> object:
        # None, "tail" and "per-class" are the defaults, which a dumped spec repeats; flow_queues
        # absent from info.data: it was refused itself, and one error is enough
        if value not in (None, "tail", "per-class") and info.data.get("flow_queues") == 0:
            raise ValueError(f"{info.field_name} sets each flow queue and needs flow_queues > 0; "
                             "without them each class has one FIFO of queue_packets")
        return value

    @field_validator("flow_queue_bytes")
    @classmethod
    def _one_limit(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("flow_queue_packets") is not None:
            raise ValueError("set flow_queue_bytes or flow_queue_packets, not both: a flow queue "
                             "has one limit")
        if value is not None and info.data.get("flow_queue_drop") == "head":
            raise ValueError("flow_queue_bytes drops at the tail only (no head-dropping byte "
                             "FIFO in this kernel); use flow_queue_packets with head drop")
        return value

    @property
    def flow_queue_limit(self) -> int:
        """The limit of each flow queue, in packets."""
        return FLOW_QUEUE_PACKETS if self.flow_queue_packets is None else self.flow_queue_packets

    def rate_mbit(self, direction: str) -> float:
        """The bottleneck's capacity in one direction ("uplink" or "downlink")."""
        own = self.uplink_mbit if direction == "uplink" else self.downlink_mbit
        return self.capacity_mbit if own is None else own

    @property
    def narrowest_mbit(self) -> float:
        return min(self.rate_mbit("uplink"), self.rate_mbit("downlink"))


class SliceSpec(Strict):
    """A network slice: an S-NSSAI, a DNN, a UE subnet and a share of the bottleneck."""

    name: Name
    sst: int = Field(ge=1, le=255)
    sd: str | None = None
    dnn: str = Field("internet", pattern=r"^[A-Za-z0-9][A-Za-z0-9.\-]{0,62}$")
    subnet: ipaddress.IPv4Network
    guaranteed_mbit: float = Field(0.0, ge=0)
    ceiling_mbit: float | None = Field(None, gt=0)

    @field_validator("sd", mode="before")
    @classmethod
    def _sd_is_hex(cls, value: object) -> object:
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError(
                "sd must be a quoted string of 6 hex digits such as \"000001\" "
                "(unquoted, YAML reads it as a number)"
            )
        m = _SD.match(value)
        if not m:
            raise ValueError(f"sd must be 6 hex digits (24 bits), got {value!r}")
        return m.group(2).lower()

    @field_validator("subnet", mode="before")
    @classmethod
    def _subnet_is_network(cls, value: object) -> object:
        return _ipv4_network(value)

    @field_validator("subnet")
    @classmethod
    def _subnet_is_unicast(cls, value: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if value.prefixlen > 30:
            raise ValueError(f"UE subnet {value} is too small: it needs a gateway and at least "
                             "one UE (/30 or larger)")
        return _unicast(value, "UE subnet")

    @property
    def snssai(self) -> tuple[int, str | None]:
        return (self.sst, self.sd)

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        return self.subnet.network_address + 1


class CoreSpec(Strict):
    """The 5G core's identity (PLMN, TAC), where the AMF listens and where subscribers live."""

    mcc: str = "001"
    mnc: str = "01"  # its length matters: "01" and "001" are different PLMNs
    tac: int = Field(1, ge=0, le=0xFFFFFF)
    amf_address: ipaddress.IPv4Address = Field(ipaddress.IPv4Address("127.0.0.5"), strict=False)
    gnb_address: ipaddress.IPv4Address = Field(ipaddress.IPv4Address("127.0.0.1"), strict=False)
    mongo_uri: str | None = None  # None: local mongod or the embedded store (local profile)
    key_seed: str = Field("testbed", min_length=1)  # K/OPc derivation when a group gives none

    @field_validator("mcc", mode="before")
    @classmethod
    def _mcc(cls, value: object) -> object:
        return _digits(value, "mcc", (3,))

    @field_validator("mnc", mode="before")
    @classmethod
    def _mnc(cls, value: object) -> object:
        return _digits(value, "mnc", (2, 3))

    @property
    def plmn(self) -> str:
        return self.mcc + self.mnc


class UEGroupSpec(Strict):
    """UEs that share a slice; on the local profile one network namespace per group.

    The subscriber fields (IMSI range, keys, AMBR, QoS) become Open5GS subscriber documents;
    K and OPc are derived from `core.key_seed` when not given (one pair per group, since
    UERANSIM's `nr-ue -n` gives every UE of a config the same keys)."""

    name: Name
    slice: Name
    count: int = Field(1, ge=1, le=1000)
    imsi_start: str | None = None
    k: str | None = None
    opc: str | None = None
    ambr_uplink_mbit: float = Field(1000.0, gt=0)
    ambr_downlink_mbit: float = Field(1000.0, gt=0)
    five_qi: int = Field(9, ge=1, le=255)
    arp_priority: int = Field(8, ge=1, le=15)
    session_type: Literal["ipv4", "ipv6", "ipv4v6"] = "ipv4"
    dnn: str | None = None  # defaults to the slice's DNN
    static_address: bool = True  # store the data plane's address as the session's ue.addr

    @field_validator("imsi_start", mode="before")
    @classmethod
    def _imsi(cls, value: object) -> object:
        return None if value is None else _digits(value, "imsi_start", (15,))

    @field_validator("k", "opc", mode="before")
    @classmethod
    def _key(cls, value: object) -> object:
        if value is None:
            return None
        if not isinstance(value, str) or not _HEX128.match(value):
            raise ValueError("must be 32 hex digits (128 bits)")
        return value.lower()


class TestbedSpec(Strict):
    """A whole testbed: what `testbed up` realises."""

    __test__ = False

    name: Name = "main"
    profile: Literal["local", "lab"] = "local"
    link: LinkSpec = LinkSpec()
    dn_subnet: ipaddress.IPv4Network = ipaddress.IPv4Network("10.200.0.0/24")
    slices: list[SliceSpec] = Field(min_length=1)
    ue_groups: list[UEGroupSpec] = Field(min_length=1)
    core: CoreSpec = CoreSpec()

    @field_validator("dn_subnet", mode="before")
    @classmethod
    def _dn_is_network(cls, value: object) -> object:
        return _ipv4_network(value)

    @field_validator("dn_subnet")
    @classmethod
    def _dn_is_unicast(cls, value: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if value.prefixlen > 30:
            raise ValueError(f"data-network subnet {value} is too small: the UPF takes .1 and the "
                             "data network .2 (/30 or larger)")
        return _unicast(value, "data-network subnet")

    def slice(self, name: str) -> SliceSpec:
        for s in self.slices:
            if s.name == name:
                return s
        raise KeyError(name)

    def groups_of(self, slice_name: str) -> list[UEGroupSpec]:
        return [g for g in self.ue_groups if g.slice == slice_name]

    def group(self, name: str) -> UEGroupSpec:
        for g in self.ue_groups:
            if g.name == name:
                return g
        raise KeyError(name)

    def imsi_start_of(self, group: UEGroupSpec) -> int:
        """First IMSI of a group: its `imsi_start`, else PLMN + MSIN (index*1000 + 1)."""
        if group.imsi_start is not None:
            return int(group.imsi_start)
        index = self.ue_groups.index(group)
        msin_len = 15 - len(self.core.plmn)
        return int(self.core.plmn + str(index * IMSI_BLOCK + 1).zfill(msin_len))

    def imsis_of(self, group: UEGroupSpec) -> list[str]:
        start = self.imsi_start_of(group)
        return [str(start + i).zfill(15) for i in range(group.count)]
