"""The state file of a running testbed: what was (or was about to be) created, for `down`.

Written before anything is created and updated as resources appear, so `testbed down` can
remove a testbed left behind by a crash, SIGKILL or Ctrl-C. Lives in /run (tmpfs), which a
reboot clears together with the namespaces it describes.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.config.names import NAME_PATTERN
from testbed.errors import StateError

if TYPE_CHECKING:
    from testbed.config.testbed_spec import TestbedSpec

STATE_DIR_ENV = "TESTBED_STATE_DIR"
DEFAULT_STATE_DIR = Path("/run/testbed")


def state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


_NAME = re.compile(NAME_PATTERN)


def prometheus_dir(name: str) -> Path:
    """The config and data of the Prometheus server a run started for testbed `name`."""
    return state_dir() / f"{check_name(name)}.prometheus"


def check_name(name: str) -> str:
    """`name` if it is a testbed name (the `name:` pattern of the testbed file), else a
    StateError: every path and namespace prefix derived from a name goes through here, so
    `--name ../../x` or `--name ''` never reaches the filesystem or matches every testbed."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise StateError(f"{name!r} is not a testbed name (a lowercase letter, then up to 11 "
                         "lowercase letters or digits)")
    return name


@dataclass
class ProcessRecord:
    """A process the testbed started outside its namespaces (e.g. mongod), to stop on down."""

    pid: int
    name: str
    start_time: float  # /proc/<pid>/stat starttime, so a reused pid is never killed


@dataclass
class TestbedState:
    __test__ = False

    name: str
    prefix: str
    status: str  # "building" | "up"
    namespaces: list[str]
    spec: dict[str, Any]
    owner_pid: int = field(default_factory=os.getpid)
    # with the pid, tells the owner from a later process that reuses its pid (None: not recorded)
    owner_start_time: float | None = field(default_factory=lambda: process_start_time(os.getpid()))
    created_at: float = field(default_factory=time.time)
    processes: list[ProcessRecord] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return state_path(self.name)

    def testbed_spec(self) -> TestbedSpec:
        """The recorded spec as a TestbedSpec (its masked secrets back to the defaults)."""
        # the pydantic models: only when a state is read, not to list the state files
        from testbed.config.secrets import unredact_testbed
        from testbed.config.testbed_spec import TestbedSpec

        return TestbedSpec.model_validate(unredact_testbed(self.spec))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TestbedState:
        raw = json.loads(text)
        raw["processes"] = [ProcessRecord(**p) for p in raw.get("processes", [])]
        raw.setdefault("owner_start_time", None)  # a state file written before it was recorded
        return cls(**raw)


def state_path(name: str) -> Path:
    return state_dir() / f"{check_name(name)}.json"


def create_state(state: TestbedState) -> None:
    """Record a new testbed; fails if one with the same name is recorded already."""
    state_dir().mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(state.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise StateError(
            f"testbed {state.name!r} is already up (state file {state.path}); "
            f"run `testbed down --name {state.name}` first"
        ) from None
    with os.fdopen(fd, "w") as f:
        f.write(state.to_json())


def save_state(state: TestbedState) -> None:
    tmp = state.path.with_suffix(".tmp")
    tmp.write_text(state.to_json())
    os.chmod(tmp, 0o600)
    tmp.replace(state.path)


def load_state(name: str) -> TestbedState:
    path = state_path(name)
    try:
        return TestbedState.from_json(path.read_text())
    except FileNotFoundError:
        raise StateError(f"no testbed named {name!r} is up (no {path})") from None
    except (ValueError, TypeError) as exc:
        raise StateError(f"state file {path} is unreadable ({exc}); remove it by hand") from None


def remove_state(name: str) -> None:
    state_path(name).unlink(missing_ok=True)


def recorded_names() -> list[str]:
    d = state_dir()
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.json") if _NAME.fullmatch(p.stem))


def process_start_time(pid: int) -> float | None:
    """Start time of `pid` in clock ticks since boot, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may contain spaces and parentheses: split after the last ')'
    fields = stat.rsplit(")", 1)[1].split()
    return float(fields[19])


def live_owner(state: TestbedState) -> str | None:
    """The process that created `state` and still runs (e.g. a scenario run using the testbed),
    as "pid N (command line)"; None when it has exited, its pid now belongs to another process,
    or it is this process."""
    pid = state.owner_pid
    if pid == os.getpid():
        return None
    started = process_start_time(pid)
    if started is None or (state.owner_start_time is not None and started != state.owner_start_time):
        return None
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    # one line whatever the arguments hold (a `python -c` script has newlines)
    words = " ".join(a.decode(errors="replace") for a in argv if a).split()
    command = " ".join("".join(c for c in w if c.isprintable()) for w in words)[:200]
    return f"pid {pid} ({command})" if command else f"pid {pid}"
