"""`LocalTestbed`: realises a testbed spec as namespaces, veths and HTB classes, and removes it.

    with LocalTestbed(load_testbed()) as tb:      # up(); down() on exit, Ctrl-C or error
        print(tb.topology.dn_addr)

`teardown(name)` removes a testbed from its state file alone, for `testbed down` after a crash.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.clock import REAL_TIME, ScenarioClock
from testbed.config import TestbedSpec
from testbed.config.secrets import redact_testbed
from testbed.errors import MissingRequirement, StateError
from testbed.net.cmd import CommandFailed, Runner, require_binaries, require_root
from testbed.net.conditions import initial_losses, schedule, shapers_at
from testbed.net.congestion import allowed_while_building
from testbed.net.netstats import LISTEN as NETSTATS_LISTEN
from testbed.net.netstats import watch_list
from testbed.net.shaping import Shaper, tc_batch, ue_shapes
from testbed.net.state import (
    ProcessRecord,
    TestbedState,
    check_name,
    create_state,
    load_state,
    process_start_time,
    prometheus_dir,
    remove_state,
    save_state,
    state_path,
)
from testbed.net.topology import Topology, prefix_for


def netns_list(runner: Runner) -> list[str]:
    out = runner.run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


class LocalTestbed:
    """One testbed on this machine; owns its namespaces and everything inside them."""

    def __init__(self, spec: TestbedSpec, runner: Runner | None = None, *,
                 provision: bool = False, mongo_uri: str | None = None,
                 store_dir: Path | None = None, clock: ScenarioClock = REAL_TIME,
                 conditions_log: Path | None = None, netstats_log: Path | None = None):
        self.spec = spec
        self.topology = Topology.from_spec(spec)
        self.runner = runner or Runner()
        self.provision = provision
        self.mongo_uri = mongo_uri
        # a store private to this testbed (its local mongod or embedded store), removed by down
        self.store_dir = store_dir
        self.provisioned: str | None = None  # "N created, M updated, K unchanged"
        self._up = False
        self._processes: list[ProcessRecord] = []  # started outside the runner, stopped on down
        self._perturber: subprocess.Popen[bytes] | None = None
        # link.conditions: replayed from `up` on, on `clock` (a time scale's faster); each step applied is
        # a line of conditions_log (default: beside the state file)
        self.clock = clock
        self.conditions_log = conditions_log
        self._replayer: subprocess.Popen[bytes] | None = None
        # each slice's and UE leaf's HTB counters, every second, as JSON lines (None: not sampled)
        self.netstats_log = netstats_log
        self._sampler: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @functools.cached_property
    def shapers(self) -> list[Shaper]:
        """The HTB trees at time 0 (both directions), computed once: the spec does not change
        while the testbed is up (a conditions trace's later steps are the replayer's)."""
        return shapers_at(self.spec, ue_shapes(self.spec, self.topology.ues), 0.0)

    def shaping_commands(self) -> list[list[str]]:
        """tc commands, namespaced to the UPF, for both directions of the bottleneck."""
        ns = self.topology.upf.name
        return [["tc", "-n", ns, *cmd[1:]] for s in self.shapers for cmd in s.commands()]

    def up(self) -> None:
        """Create everything; on any failure or interrupt, remove what was created and re-raise."""
        require_root()
        require_binaries("ip", "tc", "sysctl")
        leftovers = [n for n in netns_list(self.runner) if n.startswith(self.topology.prefix + "-")]
        if state_path(self.name).exists():
            create_state(self._state("building"))  # raises the "already up" error
        if leftovers:
            raise StateError(
                f"namespaces of an earlier testbed {self.name!r} are still here "
                f"({', '.join(leftovers)}); run `testbed down --name {self.name}` first"
            )
        create_state(self._state("building"))
        try:
            if self.provision:
                self._provision()
            with allowed_while_building(self.spec.link.tcp_congestion, self.runner):
                self.runner.run_all(self.topology.build_commands())
            delays = [k for k, c in enumerate(self.spec.link.conditions)
                      if any(s.delay_ms is not None for s in c.steps)]
            if self.spec.link.delay_ms > 0:
                self._require_netem("link.delay_ms", "set link.delay_ms: 0")
            elif delays:
                self._require_netem(f"link.conditions[{delays[0]}]'s delay_ms column",
                                    "leave the column out of the trace")
            if self.spec.link.flow_queues or any(s.ue_classes for s in self.shapers):
                # hundreds of tc commands (flow queues, UE leaves): one tc process
                for shaper in self.shapers:
                    self.runner.run(["tc", "-n", self.topology.upf.name, "-batch", "-"],
                                    input=shaper.batch())
            else:
                self.runner.run_all(self.shaping_commands())
            if self.spec.link.conditions:
                self._start_conditions()
            if self.netstats_log is not None:  # in the DN's namespace, for the cell's Prometheus
                self._sampler = self._start_helper(
                    "testbed.net.netstats", [str(self.netstats_log), "--netns",
                                             self.topology.upf.name, "--listen", NETSTATS_LISTEN],
                    watch_list(self.shapers), "netstats", ns=self.topology.dn.name)
            if self.spec.link.flow_queue_perturb_s is not None:
                self._start_perturber(self.spec.link.flow_queue_perturb_s)
            save_state(self._state("up"))
            self._up = True
        except BaseException:
            teardown(self.name, self.runner)
            raise

    def down(self) -> None:
        teardown(self.name, self.runner)
        for proc in (self._perturber, self._replayer, self._sampler):  # killed by teardown
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=2)
        self._up = False

    def __enter__(self) -> LocalTestbed:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def _provision(self) -> None:
        """Write the spec's subscribers to the store, then place UEs as the store has them."""
        # pymongo and the store: only when provisioning (`testbed down` and `status` start fast)
        from testbed.core import desired_ues, open_store

        with open_store(self.spec, self.mongo_uri, self.store_dir) as opened:
            plan = opened.store.apply(desired_ues(self.spec))
            members = opened.store.membership(self.spec)
        try:
            self.topology.place_members(members)
        except ValueError as exc:
            raise StateError(f"subscriber store disagrees with the testbed: {exc}") from None
        self.provisioned = f"{plan.summary()} ({opened.kind} store)"

    def _start_perturber(self, seconds: float) -> None:
        """`testbed.net.perturb` in the UPF's namespace, detached: it outlives this process (a
        `testbed up` returns) and dies with the namespace's processes on `down`."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.topology.upf.name, sys.executable, "-m",
             "testbed.net.perturb", self.name, f"{seconds:g}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
        self._perturber = proc
        started = process_start_time(proc.pid)
        if started is not None:
            self._processes.append(ProcessRecord(proc.pid, "flow-queue-perturb", started))

    def _start_conditions(self) -> None:
        """The traces' loss filters at time 0, then `testbed.net.conditions` in the UPF's
        namespace, detached as the perturber is, with the rest of the schedule on its stdin."""
        ues = ue_shapes(self.spec, self.topology.ues)
        ns = self.topology.upf.name
        first = initial_losses(self.spec, ues)
        if first:
            self.runner.run(["tc", "-n", ns, "-batch", "-"], input=tc_batch(first))
        steps = schedule(self.spec, ues, self.clock, first=self.shapers)
        log = self.conditions_log or state_path(self.name).with_suffix(".conditions.jsonl")
        self._replayer = self._start_helper("testbed.net.conditions", [str(log)], steps,
                                            "conditions-replay")

    @property
    def netstats_target(self) -> str | None:
        """Where (in the DN's namespace) the sampler serves its series; None when not sampling."""
        return NETSTATS_LISTEN if self.netstats_log is not None else None

    def _start_helper(self, module: str, args: list[str], stdin: Any, label: str,
                      ns: str | None = None) -> subprocess.Popen[bytes]:
        """`python -m module args` in namespace `ns` (the UPF's), detached (it outlives a
        `testbed up` and dies with the namespace's processes on `down`), `stdin` given as JSON."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns or self.topology.upf.name, sys.executable, "-m", module,
             *args],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(stdin).encode())
        proc.stdin.close()
        started = process_start_time(proc.pid)
        if started is not None:
            self._processes.append(ProcessRecord(proc.pid, label, started))
        return proc

    def _state(self, status: str) -> TestbedState:
        return TestbedState(
            name=self.name,
            prefix=self.topology.prefix,
            status=status,
            namespaces=self.topology.namespaces,
            spec=redact_testbed(self.spec.model_dump(mode="json")),  # no keys in /run
            extra={"store_dir": str(self.store_dir)} if self.store_dir else {},
            processes=list(self._processes),
        )

    def _require_netem(self, what: str, instead: str) -> None:
        probe = ["tc", "-n", self.topology.upf.name, "qdisc", "add", "dev", "lo", "root",
                 "netem", "delay", "1ms"]
        try:
            self.runner.run(probe)
        except CommandFailed as exc:
            raise MissingRequirement(
                f"{what} needs the netem qdisc, which this kernel lacks "
                f"(tc: {exc.stderr.splitlines()[-1] if exc.stderr else 'failed'}); "
                f"{instead} or load sch_netem"
            ) from None
        self.runner.run(["tc", "-n", self.topology.upf.name, "qdisc", "del", "dev", "lo", "root"])


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Ignore Ctrl-C while cleaning up, so a second Ctrl-C cannot leave half a testbed."""
    try:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _kill(pids: list[int], grace: float = 1.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if _alive(p)]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie child of ours still answers kill(0): reap it
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    return True


def teardown(name: str, runner: Runner | None = None, missing_ok: bool = True) -> list[str]:
    """Remove testbed `name`: its processes, namespaces (with their links and qdiscs), state.

    Works from the state file, and also finds namespaces by prefix when the state is gone.
    Returns the namespaces removed; with `missing_ok=False`, a StateError when there is
    neither a state file nor a namespace of that name.
    """
    runner = runner or Runner()
    check_name(name)
    with sigint_deferred():
        prefix = prefix_for(name)
        try:
            state: TestbedState | None = load_state(name)
        except StateError:
            state = None
        present = netns_list(runner)
        wanted = set(state.namespaces if state else [])
        wanted |= {n for n in present if n.startswith(prefix + "-")}
        doomed = [n for n in present if n in wanted]
        if state is None and not doomed and not missing_ok and not state_path(name).exists():
            raise StateError(f"no testbed named {name!r} is up (no state file "
                             f"{state_path(name)}, no {prefix}-* namespaces)")
        pids: list[int] = []
        for ns in doomed:
            out = runner.run(["ip", "netns", "pids", ns], check=False).stdout
            pids += [int(p) for p in out.split() if p.isdigit()]
        if state:
            pids += [p.pid for p in state.processes if process_start_time(p.pid) == p.start_time]
        _kill(sorted(set(pids)))
        for ns in doomed:
            runner.run(["ip", "netns", "del", ns], check=False)
        if state:
            _stop_core(state)
        # a run's Prometheus (killed above with its namespace's processes) leaves its data
        shutil.rmtree(prometheus_dir(name), ignore_errors=True)
        remove_state(name)
        state_path(name).with_suffix(".conditions.jsonl").unlink(missing_ok=True)
        return doomed


def _stop_core(state: TestbedState) -> None:
    """Stop what the core and RAN started for this testbed: a local mongod, nr-ue processes."""
    try:  # pymongo: only when a testbed is taken down, and not at all without it
        from testbed.core import state_dir, stop_mongod
        from testbed.ran.ue import ue_down
    except ImportError:
        return
    try:
        spec = state.testbed_spec()
    except ValueError:
        return
    core_state = Path(state.extra["store_dir"]) if state.extra.get("store_dir") else state_dir(spec)
    stop_mongod(core_state)
    for group in spec.ue_groups:
        ue_down(core_state, group.name)
    # the store and UE state are this testbed's alone: `down` leaves no directory behind
    shutil.rmtree(core_state, ignore_errors=True)


@dataclass(frozen=True)
class ClassCounters:
    """Counters of one HTB class (one slice in one direction)."""

    direction: str
    slice: str
    classid: str
    rate_mbit: float
    ceil_mbit: float
    bytes: int
    packets: int
    drops: int
    overlimits: int
    backlog_packets: int


_CLASS_RE = re.compile(
    r"class htb (?P<id>\S+) .*?\n\s*Sent (?P<bytes>\d+) bytes (?P<pkts>\d+) pkt "
    r"\(dropped (?P<drops>\d+), overlimits (?P<over>\d+).*?\n\s*backlog \S+ (?P<qlen>\d+)p",
    re.S,
)


def parse_htb_classes(text: str) -> dict[str, dict[str, int]]:
    """Counters per classid from `tc -s class show` text (iproute2 prints no JSON for HTB)."""
    out = {}
    for block in re.split(r"\n\s*\n", text):
        m = _CLASS_RE.search(block)
        if m:
            out[m["id"]] = {"bytes": int(m["bytes"]), "packets": int(m["pkts"]),
                            "drops": int(m["drops"]), "overlimits": int(m["over"]),
                            "qlen": int(m["qlen"])}
    return out


def class_counters(tb_state: TestbedState, runner: Runner | None = None) -> list[ClassCounters]:
    """Read the HTB class counters of both directions from the kernel."""
    runner = runner or Runner()
    tb = LocalTestbed(tb_state.testbed_spec(), runner)
    out: list[ClassCounters] = []
    for shaper in tb.shapers:
        text = runner.run(["tc", "-n", tb.topology.upf.name, "-s", "class", "show", "dev",
                           shaper.device]).stdout
        by_id = parse_htb_classes(text)
        for c in shaper.classes:
            k = by_id.get(c.classid, {})
            out.append(ClassCounters(
                shaper.direction, c.slice, c.classid, c.rate_mbit, c.ceil_mbit,
                k.get("bytes", 0), k.get("packets", 0), k.get("drops", 0),
                k.get("overlimits", 0), k.get("qlen", 0),
            ))
    return out
