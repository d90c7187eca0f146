"""UERANSIM v3.3.0 configs: one gNB (PLMN, TAC, every slice, the AMF) and one UE config per group,
built from the same provisioning as the subscriber store so keys and S-NSSAIs agree by construction.

UERANSIM reads sd as an integer, so it is always written as 0x-hex (a bare `000080` would be
decimal 80, while Open5GS reads the same text as hex 0x80).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testbed.config import TestbedSpec
from testbed.core.provision import desired_ues
from testbed.core.render import PeerAddresses
from testbed.core.templates import environment, render, write_files

UERANSIM_RELEASE = "v3.3.0"
NR_UE_MAX = 512  # nr-ue refuses -n above this
SESSION_TYPES = {"ipv4": "IPv4", "ipv6": "IPv6", "ipv4v6": "IPv4v6"}


@dataclass(frozen=True)
class UEConfig:
    """What one group's UE config holds; nr-ue -n `count` runs consecutive IMSIs from `imsi`."""

    name: str
    slice: str
    count: int
    imsi: str
    k: str
    opc: str
    sst: int
    sd: str | None
    dnn: str
    session_type: str
    netmask: str
    imei: str
    imeisv: str


def ue_configs(spec: TestbedSpec) -> list[UEConfig]:
    ues = desired_ues(spec)
    out = []
    for index, group in enumerate(spec.ue_groups):
        first = next(u for u in ues if u.group == group.name)
        sub = first.subscriber
        entry = sub.slice[0]
        serial = index * 1000 + 1
        out.append(UEConfig(
            name=group.name, slice=group.slice, count=group.count, imsi=first.imsi,
            k=sub.security.k, opc=sub.security.opc or "", sst=entry.sst, sd=entry.sd,
            dnn=entry.session[0].name, session_type=SESSION_TYPES[group.session_type],
            netmask=str(spec.slice(group.slice).subnet.netmask),
            imei=f"35000000{serial:06d}0", imeisv=f"35000000{serial:06d}01"))
    return out


def ueransim_files(spec: TestbedSpec, addresses: PeerAddresses | None = None) -> dict[str, str]:
    """File name -> rendered text; `addresses` (the AMF's NGAP, the gNB's) default to one host."""
    addresses = addresses or PeerAddresses.single_host(spec)
    env = environment("ueransim")
    ctx = {"name": spec.name, "mcc": spec.core.mcc, "mnc": spec.core.mnc, "tac": spec.core.tac,
           "gnb": str(addresses.gnb), "amf": str(addresses.amf_ngap), "slices": spec.slices}
    files = {"gnb.yaml": render(env, "gnb.yaml.j2", **ctx)}
    for cfg in ue_configs(spec):
        files[f"ue-{cfg.name}.yaml"] = render(env, "ue.yaml.j2", g=cfg, **ctx)
    return files


def render_ueransim(spec: TestbedSpec, outdir: Path,
                    addresses: PeerAddresses | None = None) -> list[Path]:
    """Write gnb.yaml and ue-<group>.yaml; UE files hold K/OPc, so they are mode 0600."""
    files = ueransim_files(spec, addresses)
    return write_files(files, outdir, private={n for n in files if n.startswith("ue-")})
