"""The local data plane as plain data: namespaces, links and addresses derived from a spec.

Nothing here touches the kernel. `Topology.build_commands()` lists the `ip` commands that
realise it; `testbed.bringup.local.LocalTestbed` runs them.

    ue-<group> ns          upf ns                              dn ns
    ran0 ──veth── ue-<group> ─┐
                              n3 (bridge, slice gateways) ─ route ─ n6 ──veth── n6
    (HTB on n3 shapes the downlink, HTB on n6 the uplink: both ends of the bottleneck)
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from testbed.config import SliceSpec, TestbedSpec
from testbed.net.cmd import in_ns

PREFIX_ROOT = "tb"
N3, N6, RAN = "n3", "n6", "ran0"
GSO_MAX_SIZE = 1514
GSO_OFFLOAD_SIZE = 65536


def prefix_for(name: str) -> str:
    return f"{PREFIX_ROOT}-{name}"


@dataclass(frozen=True)
class Host:
    """A network namespace."""

    name: str
    role: str  # "upf", "dn" or "ue"


@dataclass(frozen=True)
class Intf:
    host: Host
    name: str


@dataclass(frozen=True)
class Link:
    """A veth pair, each end created directly inside its namespace."""

    a: Intf
    b: Intf


@dataclass(frozen=True)
class UE:
    group: str
    index: int  # within the group
    slice: str
    address: ipaddress.IPv4Address
    host: Host


@dataclass
class Topology:
    spec: TestbedSpec
    prefix: str
    upf: Host
    dn: Host
    ue_hosts: dict[str, Host]
    links: list[Link]
    ues: list[UE]
    addresses: list[tuple[Intf, ipaddress.IPv4Interface]] = field(default_factory=list)

    @classmethod
    def from_spec(cls, spec: TestbedSpec) -> Topology:
        prefix = prefix_for(spec.name)
        upf = Host(f"{prefix}-upf", "upf")
        dn = Host(f"{prefix}-dn", "dn")
        ue_hosts = {g.name: Host(f"{prefix}-ue-{g.name}", "ue") for g in spec.ue_groups}
        links = [Link(Intf(upf, N6), Intf(dn, N6))]
        links += [Link(Intf(upf, f"ue-{g}"), Intf(h, RAN)) for g, h in ue_hosts.items()]
        ues: list[UE] = []
        next_host: dict[str, int] = {s.name: 2 for s in spec.slices}  # .1 is the gateway
        for g in spec.ue_groups:
            s = spec.slice(g.slice)
            for i in range(g.count):
                addr = s.subnet.network_address + next_host[s.name]
                next_host[s.name] += 1
                ues.append(UE(g.name, i, s.name, addr, ue_hosts[g.name]))
        topo = cls(spec, prefix, upf, dn, ue_hosts, links, ues)
        n6_len = spec.dn_subnet.prefixlen
        topo._address(Intf(upf, N6), topo.upf_n6_addr, n6_len)
        topo._address(Intf(dn, N6), topo.dn_addr, n6_len)
        for s in spec.slices:
            topo._address(Intf(upf, N3), s.gateway, s.subnet.prefixlen)
        for ue in ues:
            topo._address(Intf(ue.host, RAN), ue.address, spec.slice(ue.slice).subnet.prefixlen)
        return topo

    def _address(self, intf: Intf, addr: ipaddress.IPv4Address, prefixlen: int) -> None:
        self.addresses.append((intf, ipaddress.IPv4Interface(f"{addr}/{prefixlen}")))

    def place_members(self, members: list) -> None:
        """Take each UE's slice and address from the subscriber store's view (`Member`s with
        imsi, slice, group, address): the store, not the spec, is the source of truth."""
        by_group: dict[str, list] = {}
        for m in members:
            if m.group is not None and m.address is not None:
                by_group.setdefault(m.group, []).append(m)
        placed: list[UE] = []
        for g in self.spec.ue_groups:
            found = sorted(by_group.get(g.name, []), key=lambda m: m.imsi)
            if len(found) != g.count:
                raise ValueError(f"UE group {g.name!r}: the subscriber store has {len(found)} "
                                 f"subscribers with addresses, the spec asks for {g.count}")
            for i, m in enumerate(found):
                if m.slice != g.slice:
                    raise ValueError(f"subscriber {m.imsi[:5]}… of group {g.name!r} is in slice "
                                     f"{m.slice!r} in the store, {g.slice!r} in the spec")
                placed.append(UE(g.name, i, g.slice, m.address, self.ue_hosts[g.name]))
        self.ues = placed
        self.addresses = [(i, a) for i, a in self.addresses if i.name != RAN]
        for ue in placed:
            self._address(Intf(ue.host, RAN), ue.address, self.spec.slice(ue.slice).subnet.prefixlen)

    @property
    def upf_n6_addr(self) -> ipaddress.IPv4Address:
        return self.spec.dn_subnet.network_address + 1

    @property
    def dn_addr(self) -> ipaddress.IPv4Address:
        """Where services and iperf3 servers listen."""
        return self.spec.dn_subnet.network_address + 2

    @property
    def hosts(self) -> list[Host]:
        return [self.upf, self.dn, *self.ue_hosts.values()]

    @property
    def namespaces(self) -> list[str]:
        return [h.name for h in self.hosts]

    def ues_of_slice(self, slice_name: str) -> list[UE]:
        return [u for u in self.ues if u.slice == slice_name]

    def ues_of_group(self, group: str) -> list[UE]:
        return [u for u in self.ues if u.group == group]

    def slice_of_group(self, group: str) -> SliceSpec:
        for g in self.spec.ue_groups:
            if g.name == group:
                return self.spec.slice(g.slice)
        raise KeyError(group)

    def build_commands(self) -> list[list[str]]:
        """`ip` commands that create namespaces, links, addresses and routes, in order."""
        cmds: list[list[str]] = [["ip", "netns", "add", h.name] for h in self.hosts]
        cmds += [["ip", "-n", h.name, "link", "set", "lo", "up"] for h in self.hosts]
        cmds.append(["ip", "-n", self.upf.name, "link", "add", N3, "type", "bridge"])
        for link in self.links:
            cmds.append(["ip", "link", "add", link.a.name, "netns", link.a.host.name, "type",
                         "veth", "peer", "name", link.b.name, "netns", link.b.host.name])
        for link in self.links:
            if link.b.name == RAN:
                cmds.append(["ip", "-n", self.upf.name, "link", "set", link.a.name, "master", N3])
        for intf, iface in self.addresses:
            cmds.append(["ip", "-n", intf.host.name, "addr", "add", str(iface), "dev", intf.name])
        for link in self.links:
            for end in (link.a, link.b):
                # Segmentation offload would hand HTB 64 KB super-packets: shaping turns bursty,
                # fairness between classes skews and packet-count queue limits hold megabytes.
                # (`link.segmentation: offload` lifts it where the link is not measured)
                gso = GSO_OFFLOAD_SIZE if self.spec.link.segmentation == "offload" else GSO_MAX_SIZE
                cmds.append(["ip", "-n", end.host.name, "link", "set", end.name, "gso_max_size",
                             str(gso), "up"])
        cmds.append(["ip", "-n", self.upf.name, "link", "set", N3, "up"])
        cmds.append(in_ns(self.upf.name, ["sysctl", "-qw", "net.ipv4.ip_forward=1"]))
        for h in self.hosts if self.spec.link.tcp_congestion else ():
            cmds.append(in_ns(h.name, ["sysctl", "-qw", "net.ipv4.tcp_congestion_control="
                                       + self.spec.link.tcp_congestion]))
        cmds.append(["ip", "-n", self.dn.name, "route", "add", "default", "via", str(self.upf_n6_addr)])
        for group, host in self.ue_hosts.items():
            gw = self.slice_of_group(group).gateway
            cmds.append(["ip", "-n", host.name, "route", "add", "default", "via", str(gw)])
        return cmds
