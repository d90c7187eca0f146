"""Bringing a UE group up and reporting UE state: `nr-ue` processes on the lab profile (waiting for
one `uesimtunN` per UE), the group's network namespace on the local profile."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from testbed.config import TestbedSpec
from testbed.core.store import SubscriberStore
from testbed.errors import MissingRequirement, StateError
from testbed.net.topology import Topology
from testbed.ran.render import NR_UE_MAX, render_ueransim

TUN_PREFIX = "uesimtun"
NETNS_DIR = Path("/run/netns")


@dataclass
class UpResult:
    group: str
    profile: str
    namespace: str | None = None  # local profile
    interfaces: list[str] = field(default_factory=list)  # lab profile: the new uesimtunN
    pids: list[int] = field(default_factory=list)
    addresses: list[ipaddress.IPv4Address] = field(default_factory=list)


@dataclass(frozen=True)
class UEStatus:
    imsi: str
    group: str
    slice: str
    address: ipaddress.IPv4Address | None
    provisioned: bool
    state: str  # "up", "down", "running", "stopped"


def list_interfaces() -> set[str]:
    try:
        return set(os.listdir("/sys/class/net"))
    except OSError:
        return set()


def _record_file(state: Path, group: str) -> Path:
    return state / f"nr-ue-{group}.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ue_up(spec: TestbedSpec, group: str, state: Path, timeout_s: float = 30.0,
          interfaces: Callable[[], set[str]] = list_interfaces,
          nr_ue: str | None = None) -> UpResult:
    """Bring up every UE of `group`. Lab: start nr-ue (512 UEs per process at most) and wait
    until one new uesimtunN per UE exists; on failure stop what was started. Local: the group's
    namespace from the data plane, which must already exist."""
    try:
        g = spec.group(group)
    except KeyError:
        raise StateError(f"no UE group {group!r} (groups: "
                         f"{', '.join(x.name for x in spec.ue_groups)})") from None
    topo = Topology.from_spec(spec)
    addresses = [u.address for u in topo.ues_of_group(group)]
    if spec.profile == "local":
        ns = topo.ue_hosts[group].name
        if not (NETNS_DIR / ns).exists():
            raise StateError(f"UE namespace {ns} does not exist: run `testbed up` first")
        return UpResult(group, "local", namespace=ns, addresses=addresses)
    binary = nr_ue or shutil.which("nr-ue")
    if binary is None:
        raise MissingRequirement("nr-ue (UERANSIM v3.3.0) is not on PATH; build UERANSIM or add "
                                 "its build/ directory to PATH")
    config_dir = state / "ueransim"
    render_ueransim(spec, config_dir)
    config = config_dir / f"ue-{group}.yaml"
    before = {i for i in interfaces() if i.startswith(TUN_PREFIX)}
    imsis = spec.imsis_of(g)
    procs: list[subprocess.Popen[bytes]] = []
    log_path = state / f"nr-ue-{group}.log"
    with open(log_path, "ab") as log:
        for first in range(0, g.count, NR_UE_MAX):
            n = min(NR_UE_MAX, g.count - first)
            procs.append(subprocess.Popen(
                [binary, "-c", str(config), "-n", str(n), "-i", imsis[first]],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    _record_file(state, group).write_text(json.dumps({"pids": [p.pid for p in procs]}))
    deadline = time.monotonic() + timeout_s
    new: set[str] = set()
    try:
        while True:
            new = {i for i in interfaces() if i.startswith(TUN_PREFIX)} - before
            if len(new) >= g.count:
                break
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                raise StateError(f"nr-ue for group {group} exited with {dead[0].returncode} after "
                                 f"{len(new)} of {g.count} PDU sessions; see {log_path}")
            if time.monotonic() > deadline:
                raise StateError(f"only {len(new)} of {g.count} uesimtun interfaces of group "
                                 f"{group} came up within {timeout_s:g} s; see {log_path}")
            time.sleep(0.2)
    except BaseException:
        _stop(procs)
        _record_file(state, group).unlink(missing_ok=True)
        raise
    return UpResult(group, "lab", interfaces=sorted(new, key=_tun_index),
                    pids=[p.pid for p in procs], addresses=addresses)


def ue_down(state: Path, group: str) -> int:
    """Stop the nr-ue processes recorded for `group`; returns how many were running."""
    try:
        pids = json.loads(_record_file(state, group).read_text())["pids"]
    except (OSError, ValueError, KeyError):
        return 0
    running = [p for p in pids if _alive(p)]
    for pid in running:
        os.kill(pid, signal.SIGTERM)
    _record_file(state, group).unlink(missing_ok=True)
    return len(running)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _tun_index(name: str) -> int:
    suffix = name[len(TUN_PREFIX):]
    return int(suffix) if suffix.isdigit() else -1


def ue_status(spec: TestbedSpec, store: SubscriberStore | None, state: Path) -> list[UEStatus]:
    """One row per UE of the spec: IMSI, group, slice, address (from the store when it holds
    one), whether it is provisioned, and whether it runs."""
    topo = Topology.from_spec(spec)
    stored = {s.imsi: s for s in store.list()} if store is not None else {}
    rows = []
    for g in spec.ue_groups:
        if spec.profile == "local":
            running = (NETNS_DIR / topo.ue_hosts[g.name].name).exists()
            state_word = "up" if running else "down"
        else:
            try:
                pids = json.loads(_record_file(state, g.name).read_text())["pids"]
            except (OSError, ValueError, KeyError):
                pids = []
            state_word = "running" if any(_alive(p) for p in pids) else "stopped"
        for imsi, ue in zip(spec.imsis_of(g), topo.ues_of_group(g.name), strict=True):
            sub = stored.get(imsi)
            address = sub.address if sub is not None and sub.address is not None else ue.address
            rows.append(UEStatus(imsi, g.name, g.slice, address, sub is not None, state_word))
    return rows
