"""A lab's Open5GS and UERANSIM configs, with the addresses its hosts reach each other on read
from the inventory and checked before anything is written (`testbed render -i` and `up --profile lab`).

Where each address comes from (the roles place the whole core on the `core` host and the gNB with
its UEs on the `ran` host):
- the AMF's NGAP (N2), which the gNB connects to: `amf_ngap_address` of the core host;
- each slice UPF's GTP-U (N3), which the gNB sends uplink to: `upf_n3_address` of the core host,
  one address per UPF (a mapping slice -> address; a single address when there is one slice);
  the gNB always sends to port 2152 (UERANSIM's `cons::GtpPort`), so two UPFs cannot share an
  address by taking different ports;
- the gNB's NGAP source, downlink GTP-U and radio-link address: `gnb_address` of the ran host.
PFCP, SBI and metrics stay on the core host's loopback: both ends of each run there.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from testbed.config import TestbedSpec, load_yaml_file
from testbed.config.yamlfile import FieldPath
from testbed.core.render import GTPU_PORT, PeerAddresses, render_open5gs
from testbed.errors import ConfigError, MissingRequirement
from testbed.lab.inventory import LabInventory
from testbed.ran.render import render_ueransim

CORE_GROUP, RAN_GROUP = "core", "ran"


def peer_addresses(spec: TestbedSpec, inventory: LabInventory) -> PeerAddresses:
    """The N2, N3 and gNB addresses of `inventory` for `spec`'s slices, or a ConfigError naming
    the inventory's file, line and field (one problem: the first found)."""
    core = inventory.one(CORE_GROUP, "core host (Open5GS and the UPFs run there)")
    ran = inventory.one(RAN_GROUP, "RAN host (the UERANSIM gNB runs there)")
    amf = _address(inventory, core, "amf_ngap_address",
                   f"the AMF's NGAP (N2) address, which the gNB on {ran} connects to")
    gnb = _address(inventory, ran, "gnb_address",
                   f"the gNB's N2/N3 address, which the AMF and UPFs on {core} answer to")
    n3 = _n3_addresses(spec, inventory, core, ran)
    for slice_name, address in n3.items():
        if address == gnb:
            raise _error(inventory, ran, "gnb_address", f"{gnb} is also the N3 address of slice "
                         f"{slice_name!r} on {core}: two hosts cannot share one address")
    if amf == gnb:
        raise _error(inventory, ran, "gnb_address", f"{gnb} is also the AMF's NGAP address on "
                     f"{core}: two hosts cannot share one address")
    return PeerAddresses(amf_ngap=amf, gnb=gnb, upf_n3=n3)


def _n3_addresses(spec: TestbedSpec, inventory: LabInventory, core: str,
                  ran: str) -> dict[str, ipaddress.IPv4Address]:
    var = "upf_n3_address"
    value = inventory.var(core, var)
    names = [s.name for s in spec.slices]
    what = f"the GTP-U (N3) address the gNB on {ran} sends a slice's user plane to"
    if not isinstance(value, dict):
        address = _address(inventory, core, var, what)
        if len(names) > 1:
            raise _error(inventory, core, var, f"one address for {len(names)} UPFs (slices "
                         f"{', '.join(names)}): the gNB sends GTP-U to port {GTPU_PORT} of each "
                         "UPF's address, so each UPF needs its own; give one per slice, e.g. "
                         f"{{{names[0]}: 192.168.10.10, {names[1]}: 192.168.10.11}}")
        return {names[0]: address}
    unknown = [k for k in value if k not in names]
    if unknown:
        raise _error(inventory, core, var, f"no slice {unknown[0]!r} in testbed {spec.name!r} "
                     f"(slices: {', '.join(names)})", unknown[0])
    out: dict[str, ipaddress.IPv4Address] = {}
    for name in names:
        if name not in value:
            raise _error(inventory, core, var, f"no N3 address for slice {name!r}: every "
                         f"slice's UPF needs one ({what})")
        address = _address(inventory, core, var, what, name)
        taken = next((other for other, a in out.items() if a == address), None)
        if taken is not None:
            raise _error(inventory, core, var, f"{address} is also the N3 address of slice "
                         f"{taken!r}: two UPFs on {core} cannot share one address and port "
                         f"{GTPU_PORT} (the gNB sends every UPF's GTP-U to that port)", name)
        out[name] = address
    return out


def _address(inventory: LabInventory, host: str, var: str, what: str,
             *key: str) -> ipaddress.IPv4Address:
    value: Any = inventory.var(host, var)
    for part in key:
        value = value.get(part) if isinstance(value, dict) else None
    if value is None or value == "":
        raise _error(inventory, host, var, f"missing: {what} (see playbooks/inventory.example.yml)",
                     *key)
    try:
        address = ipaddress.IPv4Address(str(value).strip())
    except ValueError:
        raise _error(inventory, host, var, f"{value!r} is not an IPv4 address ({what})",
                     *key) from None
    if address.is_loopback or address.is_unspecified or address.is_multicast:
        kind = ("loopback" if address.is_loopback else
                "unspecified" if address.is_unspecified else "multicast")
        raise _error(inventory, host, var, f"{address} is {kind}, which another host cannot "
                     f"reach; give an address of {host} on the network toward its peer ({what})",
                     *key)
    return address


def _error(inventory: LabInventory, host: str, var: str, message: str, *key: str) -> ConfigError:
    return ConfigError([inventory.problem(host, var, message, *key)])


RENDERERS = {"open5gs": render_open5gs, "ueransim": render_ueransim}


def render_part(part: str, spec: TestbedSpec, addresses: PeerAddresses | None,
                outdir: Path) -> list[Path]:
    """Write one part ("open5gs" or "ueransim") into `outdir`; `addresses` None: one host."""
    return RENDERERS[part](spec, outdir, addresses)


def render_lab(spec: TestbedSpec, inventory: LabInventory, dest: Path) -> list[Path]:
    """Write `dest`/open5gs and `dest`/ueransim with `inventory`'s addresses, as
    `up --profile lab` uses them."""
    addresses = peer_addresses(spec, inventory)
    return [path for part in RENDERERS for path in render_part(part, spec, addresses, dest / part)]


def check_rendered(rendered: Path, addresses: PeerAddresses) -> None:
    """A ConfigError at the first peer address in a `testbed render` output (`rendered`/open5gs,
    `rendered`/ueransim) that is not the inventory's: a render from another inventory or from
    none (one host, loopback) would leave the gNB unable to reach the core."""
    expected: list[tuple[str, FieldPath, ipaddress.IPv4Address, str]] = [
        ("open5gs/amf.yaml", ("amf", "ngap", "server", 0, "address"), addresses.amf_ngap,
         "amf_ngap_address"),
        *[(f"open5gs/upf-{name}.yaml", ("upf", "gtpu", "server", 0, "address"), address,
           f"upf_n3_address of slice {name!r}") for name, address in addresses.upf_n3.items()],
        ("ueransim/gnb.yaml", ("amfConfigs", 0, "address"), addresses.amf_ngap, "amf_ngap_address"),
        ("ueransim/gnb.yaml", ("ngapIp",), addresses.gnb, "gnb_address"),
        ("ueransim/gnb.yaml", ("gtpIp",), addresses.gnb, "gnb_address"),
    ]
    for name, path, want, var in expected:
        file = rendered / name
        if not file.is_file():
            raise MissingRequirement(f"{file} is missing: render it with `testbed render "
                                     f"{name.split('/')[0]} -i INVENTORY -o {file.parent}`")
        doc = load_yaml_file(file)
        got: Any = doc.data
        for key in path:
            got = got[key] if isinstance(got, dict | list) and _has(got, key) else None
        if str(got) != str(want):
            raise ConfigError([doc.problem(path, f"{got} is not the inventory's {var} ({want}): "
                                           "render again with `testbed render "
                                           f"{name.split('/')[0]} -i INVENTORY`")])


def _has(container: dict[Any, Any] | list[Any], key: str | int) -> bool:
    if isinstance(container, dict):
        return key in container
    return isinstance(key, int) and 0 <= key < len(container)
