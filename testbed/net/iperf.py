"""iperf3 traffic through a testbed: servers in the data-network namespace, clients in a UE's.

    with IperfSession.start(topology, slice_name="be", flows=10, duration=10) as session:
        result = session.wait()      # IperfResult: per-flow and total goodput, retransmits, RTT

Several sessions run at once on distinct ports (the slicing benchmark runs "ai" beside "be").
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

from testbed.errors import TestbedError
from testbed.net.cmd import Runner, die_with_parent, in_ns, require_binaries
from testbed.net.topology import UE, Topology

BASE_PORT = 5201


class IperfFailed(TestbedError):
    pass


@dataclass(frozen=True)
class FlowResult:
    stream: int
    goodput_mbit: float  # received bits per second, in Mbit/s
    retransmits: int | None  # sender-side; None where the sender's report is missing
    mean_rtt_ms: float | None


@dataclass
class IperfResult:
    slice: str
    ue: str
    direction: str  # "uplink" (UE → DN) or "downlink" (DN → UE, iperf3 -R)
    flows: list[FlowResult]
    total_mbit: float
    retransmits: int | None
    mean_rtt_ms: float | None
    seconds: float
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("raw")
        return d


def parse_iperf_json(raw: dict[str, Any], *, slice_name: str, ue: str, reverse: bool) -> IperfResult:
    """Turn iperf3 -J output (client side) into an IperfResult."""
    if "error" in raw and not raw.get("end", {}).get("streams"):
        raise IperfFailed(f"iperf3 failed: {raw['error']}")
    end = raw.get("end", {})
    # In reverse mode the server sends; its own report (--get-server-output) has RTT and
    # retransmits, the client's has none.
    sender_end = raw.get("server_output_json", {}).get("end", {}) if reverse else end
    sender_streams = sender_end.get("streams", [])
    flows = []
    for i, stream in enumerate(end.get("streams", [])):
        receiver = stream.get("receiver", {})
        sender = sender_streams[i].get("sender", {}) if i < len(sender_streams) else {}
        rtt = sender.get("mean_rtt")
        flows.append(FlowResult(
            stream=i,
            goodput_mbit=receiver.get("bits_per_second", 0.0) / 1e6,
            retransmits=sender.get("retransmits"),
            mean_rtt_ms=None if rtt is None else rtt / 1000.0,
        ))
    total = end.get("sum_received", {}).get("bits_per_second", 0.0) / 1e6
    retrans = sender_end.get("sum_sent", {}).get("retransmits")
    rtts = [f.mean_rtt_ms for f in flows if f.mean_rtt_ms is not None]
    seconds = end.get("sum_received", {}).get("seconds", 0.0)
    return IperfResult(slice_name, ue, "downlink" if reverse else "uplink", flows, total, retrans,
                       sum(rtts) / len(rtts) if rtts else None, seconds, raw)


def used_ports(topology: Topology, runner: Runner) -> set[int]:
    out = runner.run(in_ns(topology.dn.name, ["ss", "-Hltn"]), check=False).stdout
    ports = set()
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4 and ":" in cols[3]:
            with contextlib.suppress(ValueError):
                ports.add(int(cols[3].rsplit(":", 1)[1]))
    return ports


def pick_ue(topology: Topology, slice_name: str, index: int = 0) -> UE:
    ues = topology.ues_of_slice(slice_name)
    if not ues:
        known = ", ".join(s.name for s in topology.spec.slices)
        raise TestbedError(f"no UE in slice {slice_name!r} (slices: {known})")
    return ues[index % len(ues)]


@dataclass(frozen=True)
class IperfFlows:
    """What an iperf3 client runs: `flows` parallel streams (-P) for `duration` seconds (-t), the
    first `omit` of them left out of its report (-O), downlink where `reverse` (-R)."""

    flows: int
    duration: float
    reverse: bool
    omit: int


class IperfSession:
    """One iperf3 server (DN) and client (UE) pair running a timed test."""

    _reserved: ClassVar[set[int]] = set()

    def __init__(self, topology: Topology, ue: UE, port: int, *, flows: IperfFlows,
                 server: subprocess.Popen[bytes], client: subprocess.Popen[str]):
        self.topology, self.ue, self.port = topology, ue, port
        self.flows, self.duration = flows.flows, flows.duration
        self.reverse, self.omit = flows.reverse, flows.omit
        self._server, self._client = server, client

    def pids(self) -> list[int]:
        """The process ids of its server and client while they run."""
        return [p.pid for p in (self._server, self._client) if p.poll() is None]

    @classmethod
    def start(cls, topology: Topology, slice_name: str, *, flows: int = 1, duration: float = 10,
              reverse: bool = False, omit: int = 0, ue_index: int = 0,
              bitrate_mbit: float | None = None, runner: Runner | None = None) -> IperfSession:
        require_binaries("iperf3")
        runner = runner or Runner()
        ue = pick_ue(topology, slice_name, ue_index)
        busy = used_ports(topology, runner) | cls._reserved
        port = next(p for p in range(BASE_PORT, BASE_PORT + 1000) if p not in busy)
        cls._reserved.add(port)
        dn = str(topology.dn_addr)
        server = subprocess.Popen(
            in_ns(topology.dn.name, ["iperf3", "-s", "-1", "-J", "-B", dn, "-p", str(port)]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent())
        try:
            _wait_listening(topology, port, runner, server)
            argv = ["iperf3", "-c", dn, "-p", str(port), "-B", str(ue.address), "-P", str(flows),
                    "-t", f"{duration:g}", "-O", str(omit), "-J", "--connect-timeout", "3000"]
            if bitrate_mbit is not None:  # each flow paced at this rate (else as fast as it can)
                argv += ["-b", f"{bitrate_mbit * 1e6:.0f}"]
            if reverse:
                argv += ["-R", "--get-server-output"]  # the server is the sender: its RTTs
            client = subprocess.Popen(in_ns(ue.host.name, argv), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True,
                                      preexec_fn=die_with_parent())
        except BaseException:
            server.kill()
            server.wait()
            cls._reserved.discard(port)
            raise
        return cls(topology, ue, port, flows=IperfFlows(flows, duration, reverse, omit),
                   server=server, client=client)

    def wait(self, timeout: float | None = None) -> IperfResult:
        try:
            out, err = self._client.communicate(timeout=timeout or self.duration + self.omit + 15)
        finally:
            self.stop()
        try:
            raw = json.loads(out)
        except json.JSONDecodeError:
            raise IperfFailed(f"iperf3 client gave no JSON: {err.strip() or out[:200]}") from None
        return parse_iperf_json(raw, slice_name=self.ue.slice, ue=str(self.ue.address),
                                reverse=self.reverse)

    def __enter__(self) -> IperfSession:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        """End the client and the server if they still run (safe to call twice)."""
        for proc in (self._client, self._server):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        IperfSession._reserved.discard(self.port)


def _wait_listening(topology: Topology, port: int, runner: Runner,
                    server: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise IperfFailed(f"iperf3 server on port {port} exited with {server.returncode}")
        if port in used_ports(topology, runner):
            return
        time.sleep(0.02)
    raise IperfFailed(f"iperf3 server did not listen on port {port} within {timeout:g} s")


def save_json(result: IperfResult, directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(result.raw, indent=1))
    return path
