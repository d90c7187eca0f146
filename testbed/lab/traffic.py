"""The lab's `TrafficBackend`: load clients and iperf3 on the UE hosts, inside each UE's PDU session.

UERANSIM gives every PDU session a `uesimtun*` device with the UE's address and an `ip rule from
<address>` into the session's routing table, so a program whose sockets are bound to that address
sends through the session (the same rule `nr-binder` relies on). Clients therefore run as
`testbed load … --source <UE address>` and iperf3 as `iperf3 -B <UE address>`, each as a transient
systemd unit (`systemd-run`, named `tb-run-<run>-…`, SIGINT to stop so clients flush) on the UE
host, writing into `/var/lib/testbed/runs/<run>/<cell>/`. `stop()` stops them, waits for iperf3,
and fetches records, iperf3 JSON and logs into the cell directory. `close()` stops every unit the
run started, also after a failure, and is safe to call twice; leaving a `with` block calls it (and
`playbooks/reset.yml` stops any `tb-run-*` left by a crash).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from testbed.clock import WALL_TIME, PollClock
from testbed.config import TestbedSpec
from testbed.errors import StateError
from testbed.lab.hosts import HostFailed, HostRunner
from testbed.load.traffic import ClientJob, IperfJob

REMOTE_ROOT = "/var/lib/testbed/runs"
# the load client on the UE hosts: the `load_client` role installs testbed into this venv
REMOTE_LOAD = ("/opt/testbed/venv/bin/python", "-m", "testbed", "load")


@dataclass(frozen=True)
class UeSession:
    """One PDU session on a UE host: its TUN device, address and slice."""

    host: str
    tun: str
    address: str
    slice: str


def parse_sessions(host: str, ip_addr_output: str, spec: TestbedSpec) -> list[UeSession]:
    """`ip -o -4 addr show` lines of `uesimtun*` devices → sessions, slice by subnet."""
    nets = [(s.name, ipaddress.ip_network(str(s.subnet))) for s in spec.slices]
    out = []
    for line in ip_addr_output.splitlines():
        f = line.split()
        if len(f) < 4 or not f[1].startswith("uesimtun") or f[2] != "inet":
            continue
        addr = ipaddress.ip_address(f[3].split("/")[0])
        slice_name = next((n for n, net in nets if addr in net), None)
        if slice_name is not None:
            out.append(UeSession(host, f[1], str(addr), slice_name))
    return out


def discover_sessions(hosts: HostRunner, ue_hosts: Sequence[str], spec: TestbedSpec,
                      groups: Sequence[str]) -> list[UeSession]:
    """Every UE host's PDU sessions; a StateError naming the host(s) when a UE group that the
    scenario uses has fewer sessions in its slice than it has UEs."""
    sessions: list[UeSession] = []
    for host in ue_hosts:
        res = hosts.run(host, ["ip", "-o", "-4", "addr", "show"], what="list the PDU sessions")
        sessions += parse_sessions(host, res.stdout, spec)
    by_group = {g.name: g for g in spec.ue_groups}
    for name in dict.fromkeys(groups):
        group = by_group[name]
        want = sum(g.count for g in spec.ue_groups if g.slice == group.slice)
        have = [s for s in sessions if s.slice == group.slice]
        if len(have) < want:
            subnet = next(s.subnet for s in spec.slices if s.name == group.slice)
            raise StateError(
                f"{', '.join(ue_hosts)}: UE group {name!r} has no PDU session for "
                f"{want - len(have)} of {want} UEs of slice {group.slice!r} (no uesimtun address "
                f"in {subnet}; `systemctl status tb-ue-{name}` and the UE log on that host)")
    return sessions


@dataclass(frozen=True)
class RunCell:
    """Which run's cell a `LabTraffic` drives: its files and systemd units on the hosts are
    named from both."""

    run_id: str
    cell: str


class LabTraffic:
    """Clients and iperf3 of one cell on the lab's UE hosts."""

    def __init__(self, hosts: HostRunner, sessions: Sequence[UeSession],
                 iperf_servers: Sequence[tuple[str, int]], group_slices: dict[str, str], *,
                 cell: RunCell, load_command: Sequence[str] = REMOTE_LOAD, poll_s: float = 15.0,
                 clock: PollClock = WALL_TIME):
        self.hosts = hosts
        self.sessions = list(sessions)
        self.iperf_servers = list(iperf_servers)
        self.group_slices = dict(group_slices)
        self.run_id = cell.run_id
        self.remote = f"{REMOTE_ROOT}/{cell.run_id}/{cell.cell}"
        self.prefix = f"tb-run-{cell.run_id}-{cell.cell}".replace("/", "-")
        self.load_command = tuple(load_command)
        self.poll_s = poll_s
        self._clock = clock
        self._clients: list[tuple[str, str, ClientJob]] = []  # (host, unit, job)
        self._iperf: list[tuple[str, str, IperfJob]] = []
        self._prepared: set[str] = set()
        self._copied: dict[tuple[str, Path], str] = {}
        self._running = False
        self._checked = 0.0

    # --- placement ---------------------------------------------------------------------------

    def _session(self, slice_name: str, index: int) -> UeSession:
        mine = [s for s in self.sessions if s.slice == slice_name]
        if not mine:
            raise StateError(f"no PDU session in slice {slice_name!r} on the UE hosts")
        return mine[index % len(mine)]

    def _sources_beside(self, ue: UeSession) -> list[str]:
        """The addresses of the PDU sessions of `ue`'s slice on its host, `ue`'s first: a client
        there sends from each in turn."""
        return [ue.address] + [s.address for s in self.sessions
                               if s.slice == ue.slice and s.host == ue.host and s is not ue]

    def _prepare(self, host: str) -> None:
        if host not in self._prepared:
            self.hosts.run(host, ["mkdir", "-p", self.remote], what="create the run directory")
            self._prepared.add(host)

    def _unit(self, kind: str, index: int) -> str:
        return f"{self.prefix}-{kind}-{index}"

    # --- TrafficBackend ------------------------------------------------------------------------

    async def start_iperf(self, jobs: Sequence[IperfJob]) -> list[str]:
        if len(jobs) > len(self.iperf_servers):
            raise StateError(f"{len(jobs)} iperf3 flow sets need as many iperf3 server ports; the "
                             f"traffic hosts offer {len(self.iperf_servers)} (iperf3_ports)")
        for i, job in enumerate(jobs):
            ue = self._session(job.slice, job.ue_index)
            server, port = self.iperf_servers[i]
            self._prepare(ue.host)
            unit = self._unit("iperf", i)
            argv = ["systemd-run", "--unit", unit, "--collect", "-p", "KillSignal=SIGINT",
                    "--", "iperf3", "-c", server, "-p", str(port), "-B", ue.address,
                    "-P", str(job.flows), "-t", f"{job.duration_s:g}", "--json",
                    "--logfile", f"{self.remote}/{job.out.name}", *(["-R"] if job.reverse else [])]
            self.hosts.run(ue.host, argv, what=f"start iperf3 in slice {job.slice} from "
                           f"{ue.tun} {ue.address} to {server}:{port}")
            self._iperf.append((ue.host, unit, job))
        return []

    async def start_clients(self, jobs: Sequence[ClientJob]) -> list[str]:
        for job in jobs:
            ue = self._client_session(job)
            self._prepare(ue.host)
            trace = self._copy_trace(ue.host, job.trace) if job.trace is not None else None
            profiles = self._copy_profiles(ue.host, job.profiles) if job.profiles is not None else None
            unit = self._unit("client", job.index)
            log = f"{self.remote}/client-{job.index}.log"
            argv = ["systemd-run", "--unit", unit, "--collect", "-p", "KillSignal=SIGINT",
                    "-p", "TimeoutStopSec=20", "-p", f"StandardOutput=append:{log}",
                    "-p", f"StandardError=append:{log}", "--", *self.load_command,
                    *job.load_argv(out=f"{self.remote}/{job.out.name}", slice=ue.slice,
                                   sources=self._sources_beside(ue), trace=trace,
                                   profiles=profiles, ue_group=job.ue_group)]
            self.hosts.run(ue.host, argv, what=f"start client {job.index} ({job.service}) on "
                           f"{ue.tun} {ue.address}")
            self._clients.append((ue.host, unit, job))
        self._running = bool(self._clients)
        self._checked = self._clock.monotonic()
        return []

    def _client_session(self, job: ClientJob) -> UeSession:
        # UEs of one slice are interchangeable on the lab: the SMF hands out addresses of the
        # slice's subnet in attach order, so a group is known by its slice only
        slice_name = self.group_slices.get(job.ue_group)
        if slice_name is None:
            raise StateError(f"client {job.index}: unknown UE group {job.ue_group!r}")
        return self._session(slice_name, job.index)

    def _copy_trace(self, host: str, trace: Path) -> str:
        key = (host, trace)
        if key not in self._copied:
            dest = f"{self.remote}/trace-{len(self._copied)}-{trace.name}"
            self.hosts.copy(host, trace, dest, what=f"copy the trace {trace}")
            self._copied[key] = dest
        return self._copied[key]

    def _copy_profiles(self, host: str, path: Path) -> str:
        """The profile file, and the modules beside it that its `client:` may name, in a folder of
        their own on the host (the client imports them from the file's folder)."""
        key = (host, path)
        if key not in self._copied:
            folder = f"{self.remote}/profiles-{len(self._copied)}"
            self.hosts.run(host, ["mkdir", "-p", folder], what=f"make {folder}")
            for f in [path, *sorted(path.parent.glob("*.py"))]:
                self.hosts.copy(host, f, f"{folder}/{f.name}", what=f"copy {f}")
            self._copied[key] = f"{folder}/{path.name}"
        return self._copied[key]

    def clients_running(self) -> bool:
        if self._running and self._clock.monotonic() - self._checked >= self.poll_s:
            self._checked = self._clock.monotonic()
            self._running = any(self._active(host, [u for h, u, _ in self._clients if h == host])
                                for host in {h for h, _, _ in self._clients})
        return self._running

    def _active(self, host: str, units: list[str]) -> int:
        if not units:
            return 0
        res = self.hosts.run(host, ["systemctl", "is-active", *units], what="check the clients",
                             check=False)
        return sum(line.strip() in ("active", "activating", "deactivating")
                   for line in res.stdout.splitlines())

    async def stop(self) -> list[str]:
        problems: list[str] = []
        for host in {h for h, _, _ in self._clients}:
            units = [u for h, u, _ in self._clients if h == host]
            problems += self._try(host, ["systemctl", "stop", *units], "stop the clients")
        # iperf3 runs for the cell's duration + 1 s; give it 30 s more, as the local profile does
        deadline = self._clock.monotonic() + 30
        for host in {h for h, _, _ in self._iperf}:
            units = [u for h, u, _ in self._iperf if h == host]
            while self._clock.monotonic() < deadline and self._active(host, units):
                self._clock.sleep(1.0)
            problems += self._try(host, ["systemctl", "stop", *units], "stop iperf3")
        for host, _, job in self._clients:
            problems += self._fetch(host, job.out.name, job.out, f"client {job.index}'s records")
            problems += self._fetch(host, f"client-{job.index}.log",
                                    job.out.parent.parent / "logs" / f"client-{job.index}.log",
                                    f"client {job.index}'s log")
        for host, _, job in self._iperf:
            problems += self._fetch(host, job.out.name, job.out, f"iperf3 JSON of slice {job.slice}")
        self._clients, self._iperf, self._running = [], [], False
        return problems

    def __enter__(self) -> LabTraffic:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> list[str]:
        """Stop every unit this cell started (idempotent; after a failure too)."""
        problems: list[str] = []
        started = self._clients + self._iperf
        self._clients, self._iperf, self._running = [], [], False
        for host in {h for h, _, _ in started}:
            units = [u for h, u, _ in started if h == host]
            problems += self._try(host, ["systemctl", "stop", *units], "stop the run's units")
        return problems

    def _try(self, host: str, argv: list[str], what: str) -> list[str]:
        try:
            res = self.hosts.run(host, argv, what=what, check=False)
        except HostFailed as exc:
            return [str(exc)]
        return [] if res.rc in (0, 5) else [f"{host}: {what}: {res.stderr.strip() or res.rc}"]

    def _fetch(self, host: str, name: str, dest: Path, what: str) -> list[str]:
        try:
            self.hosts.fetch(host, f"{self.remote}/{name}", dest, what=f"fetch {what}")
        except HostFailed as exc:
            return [str(exc)]
        return []
