"""Open5GS v2.7.x network-function configs for a testbed spec: AMF, NSSF, one SMF and one UPF
per slice, the other NFs, the TUN setup script and a docker compose file for the lab profile.

The functions that only talk to each other on the core host follow Open5GS's own loopback plan
(NRF 127.0.0.10, SCP 127.0.1.10, AUSF .11, UDM .12, PCF .13, NSSF .14, BSF .15, UDR .20); slice i
gets SMF 127.0.4.(i+1) and UPF 127.0.7.(i+1) for SBI, PFCP and metrics. What another host reaches
comes from `PeerAddresses`: the AMF's NGAP (N2) and each UPF's GTP-U (N3) address, which the UPF
binds. Without a lab inventory these are the spec's `core.amf_address` and 127.0.7.(i+1), a core
and gNB on one host.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.config import TestbedSpec
from testbed.core.templates import environment, render, write_files

OPEN5GS_RELEASE = "v2.7.x"
NRF, SCP = "127.0.0.10", "127.0.1.10"
AMF_SBI = "127.0.0.5"
OTHER_NFS = {"ausf": "127.0.0.11", "udm": "127.0.0.12", "pcf": "127.0.0.13", "bsf": "127.0.0.15",
             "udr": "127.0.0.20"}
NSSF = "127.0.0.14"
DEFAULT_DB_URI = "mongodb://127.0.0.1/open5gs"


GTPU_PORT = 2152  # the gNB sends GTP-U to this port of the address the UPF advertises


@dataclass(frozen=True)
class PeerAddresses:
    """The addresses one host reaches on another: the AMF's NGAP (N2, from the gNB), each slice
    UPF's GTP-U (N3, from the gNB) and the gNB's own (NGAP source, downlink GTP-U, radio link)."""

    amf_ngap: ipaddress.IPv4Address
    gnb: ipaddress.IPv4Address
    upf_n3: dict[str, ipaddress.IPv4Address]  # slice name -> address

    @classmethod
    def single_host(cls, spec: TestbedSpec) -> PeerAddresses:
        """Core and gNB on one host: the spec's `core.amf_address`/`gnb_address`, UPFs on loopback."""
        return cls(amf_ngap=spec.core.amf_address, gnb=spec.core.gnb_address,
                   upf_n3={s.name: ipaddress.IPv4Address(f"127.0.7.{i + 1}")
                           for i, s in enumerate(spec.slices)})


@dataclass(frozen=True)
class SlicePlane:
    """One slice's SMF + UPF pair and the TUN device its UPF serves."""

    name: str
    sst: int
    sd: str | None
    dnn: str
    subnet: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address
    prefixlen: int
    smf: str  # the SMF's SBI, PFCP and metrics address (core host only)
    upf: str  # the UPF's PFCP and metrics address (core host only: its SMF's peer)
    n3: str  # the UPF's GTP-U address, which the gNB reaches
    dev: str


def slice_planes(spec: TestbedSpec, addresses: PeerAddresses | None = None) -> list[SlicePlane]:
    addresses = addresses or PeerAddresses.single_host(spec)
    out = []
    for i, s in enumerate(spec.slices):
        out.append(SlicePlane(
            name=s.name, sst=s.sst, sd=s.sd, dnn=s.dnn, subnet=s.subnet, gateway=s.gateway,
            prefixlen=s.subnet.prefixlen, smf=f"127.0.4.{i + 1}", upf=f"127.0.7.{i + 1}",
            n3=str(addresses.upf_n3[s.name]), dev="ogstun" if i == 0 else f"ogstun{i + 1}"))
    return out


def _context(spec: TestbedSpec, addresses: PeerAddresses) -> dict[str, Any]:
    return {
        "name": spec.name, "mcc": spec.core.mcc, "mnc": spec.core.mnc, "tac": spec.core.tac,
        "nrf": NRF, "scp": SCP, "nssf": NSSF, "gtpu_port": GTPU_PORT,
        "amf": {"sbi": AMF_SBI, "ngap": str(addresses.amf_ngap)},
        "slices": slice_planes(spec, addresses),
    }


def open5gs_files(spec: TestbedSpec, addresses: PeerAddresses | None = None) -> dict[str, str]:
    """File name -> rendered text, without writing anything; `addresses` default to one host."""
    env = environment("open5gs")
    ctx = _context(spec, addresses or PeerAddresses.single_host(spec))
    db_uri = spec.core.mongo_uri or DEFAULT_DB_URI
    files = {
        "nrf.yaml": render(env, "nrf.yaml.j2", **ctx),
        "scp.yaml": render(env, "scp.yaml.j2", **ctx),
        "amf.yaml": render(env, "amf.yaml.j2", **ctx),
        "nssf.yaml": render(env, "nssf.yaml.j2", **ctx),
    }
    for nf, address in OTHER_NFS.items():
        files[f"{nf}.yaml"] = render(env, "nf.yaml.j2", nf=nf, address=address,
                                     db_uri=db_uri if nf in ("udr", "pcf") else None, **ctx)
    for plane in ctx["slices"]:
        files[f"smf-{plane.name}.yaml"] = render(env, "smf.yaml.j2", s=plane, **ctx)
        files[f"upf-{plane.name}.yaml"] = render(env, "upf.yaml.j2", s=plane, **ctx)
    files["tun-setup.sh"] = render(env, "tun-setup.sh.j2", **ctx)
    files["compose.yaml"] = render(env, "compose.yaml.j2", nfs=_compose_services(spec, ctx),
                                   with_mongo=spec.core.mongo_uri is None, **ctx)
    return files


def _compose_services(spec: TestbedSpec, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    started = "service_started"
    nfs: list[dict[str, Any]] = [
        {"service": "nrf", "kind": "nrf", "config": "nrf.yaml", "depends": []},
        {"service": "scp", "kind": "scp", "config": "scp.yaml", "depends": [("nrf", started)]},
    ]
    for nf in ("ausf", "udm", "udr", "pcf", "bsf", "nssf", "amf"):
        deps = [("scp", started)] + ([("mongo", started)] if nf in ("udr", "pcf")
                                     and spec.core.mongo_uri is None else [])
        nfs.append({"service": nf, "kind": nf, "config": f"{nf}.yaml", "depends": deps})
    for plane in ctx["slices"]:
        nfs.append({"service": f"upf-{plane.name}", "kind": "upf", "config": f"upf-{plane.name}.yaml",
                    "depends": [("tun-setup", "service_completed_successfully")]})
        nfs.append({"service": f"smf-{plane.name}", "kind": "smf", "config": f"smf-{plane.name}.yaml",
                    "depends": [("scp", started), (f"upf-{plane.name}", started)]})
    return nfs


def render_open5gs(spec: TestbedSpec, outdir: Path,
                   addresses: PeerAddresses | None = None) -> list[Path]:
    """Write the Open5GS configs and compose file for `spec` into `outdir`."""
    # udr and pcf carry the database URI, which may hold credentials
    return write_files(open5gs_files(spec, addresses), outdir, private={"udr.yaml", "pcf.yaml"},
                       executable={"tun-setup.sh"})
