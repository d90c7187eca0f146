"""From a testbed spec to the subscriber documents it implies: one per UE, keys and addresses
derived deterministically so the store, the UERANSIM configs and the data plane agree."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass

from testbed.config import TestbedSpec, UEGroupSpec
from testbed.core.subscriber import (
    SESSION_TYPES,
    Ambr,
    Arp,
    Bitrate,
    Qos,
    Security,
    Session,
    SliceEntry,
    Subscriber,
    UeAddress,
)
from testbed.net.topology import Topology


@dataclass(frozen=True)
class GroupKeys:
    k: str
    opc: str


@dataclass(frozen=True)
class ProvisionedUE:
    """A subscriber together with where it belongs in the testbed."""

    imsi: str
    group: str
    slice: str
    address: ipaddress.IPv4Address
    subscriber: Subscriber


def derive_keys(seed: str, imsi_start: str) -> GroupKeys:
    """K and OPc from HMAC-SHA256(seed, label + first IMSI): stable across runs and hosts.

    A random 128-bit OPc is as valid as one computed from an OP, so no Milenage is needed.
    The default seed is public: derived keys suit a testbed, not a production network."""
    def derive(label: str) -> str:
        return hmac.new(seed.encode(), f"{label}:{imsi_start}".encode(), hashlib.sha256).hexdigest()[:32]

    return GroupKeys(k=derive("K"), opc=derive("OPc"))


def group_keys(spec: TestbedSpec, group: UEGroupSpec) -> GroupKeys:
    if group.k is not None and group.opc is not None:
        return GroupKeys(k=group.k, opc=group.opc)
    return derive_keys(spec.core.key_seed, spec.imsis_of(group)[0])


def desired_ues(spec: TestbedSpec) -> list[ProvisionedUE]:
    """Every UE of every group, in spec order, with its subscriber document."""
    topo = Topology.from_spec(spec)
    out: list[ProvisionedUE] = []
    for group in spec.ue_groups:
        sl = spec.slice(group.slice)
        keys = group_keys(spec, group)
        addresses = [ue.address for ue in topo.ues_of_group(group.name)]
        for imsi, address in zip(spec.imsis_of(group), addresses, strict=True):
            session = Session(
                name=group.dnn or sl.dnn,
                type=SESSION_TYPES[group.session_type],
                qos=Qos(index=group.five_qi, arp=Arp(priority_level=group.arp_priority)),
                ambr=Ambr(downlink=Bitrate.from_mbit(group.ambr_downlink_mbit),
                          uplink=Bitrate.from_mbit(group.ambr_uplink_mbit)),
                ue=UeAddress(addr=address) if group.static_address else None,
            )
            sub = Subscriber(
                imsi=imsi,
                security=Security(k=keys.k, opc=keys.opc),
                ambr=Ambr(downlink=Bitrate.from_mbit(group.ambr_downlink_mbit),
                          uplink=Bitrate.from_mbit(group.ambr_uplink_mbit)),
                slice=[SliceEntry(sst=sl.sst, sd=sl.sd, default_indicator=True, session=[session])],
            )
            out.append(ProvisionedUE(imsi, group.name, sl.name, address, sub))
    return out
