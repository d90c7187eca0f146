"""Where the subscriber store lives: a MongoDB URI, a local `mongod` we start, or the embedded store.

Order on the local profile with no URI: a `mongod` on PATH (temporary dbpath, free port, pid
recorded so `testbed down` can stop it), else the embedded store. The lab profile needs a URI
(the Open5GS MongoDB).

Embedded store: montydb (SQLite storage), chosen over mongita after trying both with the exact
operations this package needs (pymongo 4 API, montydb 2.5.6 vs mongita 1.2.0):
- montydb answers dotted queries into arrays (`{"slice.sd": "000001"}`); mongita returned 0 matches;
- montydb takes pymongo's positional projection (`find_one(q, {"_id": 0})`); mongita raises;
- montydb accepts `create_index("imsi", unique=True)`; mongita raises on `unique`;
- SQLite storage gives atomic single-document writes on disk across processes.
Neither enforces the unique index nor has transactions, so `SubscriberStore` checks IMSIs itself
and makes batches atomic with a snapshot and a compensating restore.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testbed.config import TestbedSpec
from testbed.core.store import SubscriberStore
from testbed.errors import MissingRequirement, StateError

DB_NAME = "open5gs"
COLLECTION = "subscribers"
CONNECT_TIMEOUT_MS = 3000
MONGOD_RECORD = "mongod.json"
EMBEDDED_DIR = "embedded-store"


class StoreUnreachable(MissingRequirement):
    """The MongoDB named by a URI did not answer in time."""


@dataclass(frozen=True)
class MongodRecord:
    pid: int
    port: int
    dbpath: str

    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/{DB_NAME}"


@dataclass
class OpenedStore:
    store: SubscriberStore
    kind: str  # "uri", "mongod" or "embedded"
    where: str  # for display: a URI without credentials, or a path


def state_root() -> Path:
    """Where per-testbed state lives: $TESTBED_STATE_DIR, else ~/.local/state/testbed."""
    env = os.environ.get("TESTBED_STATE_DIR")
    return Path(env) if env else Path.home() / ".local" / "state" / "testbed"


def state_dir(spec: TestbedSpec) -> Path:
    return state_root() / spec.name


def redact(uri: str) -> str:
    """A MongoDB URI without its password, for messages."""
    return re.sub(r"(//[^:/@]+):[^@/]*@", r"\1:***@", uri)


def connect(uri: str, timeout_ms: int | None = None) -> tuple[Any, Any]:
    """The `subscribers` collection at `uri` (database from the URI, else `open5gs`), checked
    with a ping so an unreachable server fails now, after `timeout_ms`, not at first use."""
    import pymongo
    from pymongo.errors import ConfigurationError, InvalidURI, PyMongoError

    timeout_ms = CONNECT_TIMEOUT_MS if timeout_ms is None else timeout_ms
    try:
        client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=timeout_ms,
                                     connectTimeoutMS=timeout_ms, appname="testbed")
    except (InvalidURI, ConfigurationError, ValueError) as exc:
        raise StateError(f"mongo uri {redact(uri)!r} is invalid: {exc}") from None
    try:
        client.admin.command("ping")
    except PyMongoError as exc:
        client.close()
        reason = str(exc).split(",")[0].split(" (configured timeouts")[0]
        raise StoreUnreachable(
            f"MongoDB at {redact(uri)} is unreachable (gave up after {timeout_ms / 1000:g} s): {reason}"
        ) from None
    return client.get_default_database(DB_NAME)[COLLECTION], client


def embedded_collection(path: Path) -> tuple[Any, Any]:
    """The `subscribers` collection of a montydb (SQLite) repository at `path`."""
    try:
        from montydb import MontyClient, set_storage
    except ImportError:
        raise MissingRequirement("the embedded subscriber store needs montydb: pip install montydb") \
            from None
    private_tree(path)
    if not (path / "monty.storage.cfg").exists():
        set_storage(str(path), storage="sqlite")
    client = MontyClient(str(path))
    return client[DB_NAME][COLLECTION], client


def private_tree(path: Path) -> None:
    """Create `path` if needed and keep it for root only: directories 0700, files 0600.
    The store's files hold every UE's K and OPc."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    for root, dirs, files in os.walk(path):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o700)
        for f in files:
            os.chmod(os.path.join(root, f), 0o600)


def _memory_collection() -> tuple[Any, Any]:
    try:
        from montydb import MontyClient
    except ImportError:
        raise MissingRequirement("the embedded subscriber store needs montydb: pip install montydb") \
            from None
    client = MontyClient(":memory:")
    return client[DB_NAME][COLLECTION], client


# ---- a local mongod ------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(record: MongodRecord) -> bool:
    try:
        cmdline = Path(f"/proc/{record.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmdline) and Path(cmdline[0].decode()).name == "mongod" \
        and record.dbpath.encode() in cmdline


def read_mongod(state: Path) -> MongodRecord | None:
    """The mongod this testbed started, if it is still running."""
    try:
        record = MongodRecord(**json.loads((state / MONGOD_RECORD).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return record if _alive(record) else None


def start_mongod(state: Path, timeout_s: float = 20.0) -> MongodRecord:
    """Start (or reuse) a mongod on 127.0.0.1 with a temporary dbpath under `state`."""
    running = read_mongod(state)
    if running is not None:
        return running
    binary = shutil.which("mongod")
    if binary is None:
        raise MissingRequirement("mongod is not on PATH")
    private_tree(state)
    dbpath = state / "mongod-data"
    shutil.rmtree(dbpath, ignore_errors=True)
    dbpath.mkdir(mode=0o700)
    port = _free_port()
    log = open(state / "mongod.log", "ab")  # noqa: SIM115 - handed to the child process
    proc = subprocess.Popen(
        [binary, "--dbpath", str(dbpath), "--port", str(port), "--bind_ip", "127.0.0.1",
         "--quiet"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    record = MongodRecord(proc.pid, port, str(dbpath))
    (state / MONGOD_RECORD).write_text(json.dumps(asdict(record)))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StateError(f"mongod exited with {proc.returncode}; see {state / 'mongod.log'}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return record
        except OSError:
            time.sleep(0.2)
    stop_mongod(state)
    raise StateError(f"mongod did not listen on 127.0.0.1:{port} within {timeout_s:g} s")


def stop_mongod(state: Path, timeout_s: float = 10.0) -> bool:
    """Stop the mongod recorded under `state` and remove its temporary dbpath; False if none."""
    record_file = state / MONGOD_RECORD
    try:
        record = MongodRecord(**json.loads(record_file.read_text()))
    except (OSError, ValueError, TypeError):
        return False
    stopped = False
    if _alive(record):
        os.kill(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _alive(record) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(record):
            os.kill(record.pid, signal.SIGKILL)
        stopped = True
    shutil.rmtree(record.dbpath, ignore_errors=True)
    record_file.unlink(missing_ok=True)
    return stopped


# ---- choosing ------------------------------------------------------------------------------
@contextmanager
def open_store(spec: TestbedSpec, mongo_uri: str | None = None,
               state: Path | None = None, create: bool = True) -> Iterator[OpenedStore]:
    """The subscriber store for `spec`: `mongo_uri`, else `core.mongo_uri`, else (local
    profile) a local mongod if one is on PATH, else the embedded store under the state dir.
    With `create=False` (a dry run) nothing is created or started: a local store that does not
    exist yet is an empty one in memory."""
    uri = mongo_uri or spec.core.mongo_uri
    state = state if state is not None else state_dir(spec)
    if uri is None and spec.profile == "lab":
        raise StateError("the lab profile needs the Open5GS MongoDB: set core.mongo_uri in the "
                         "testbed file or pass --mongo-uri")
    record = read_mongod(state) if uri is None else None
    if uri is not None:
        collection, client = connect(uri)
        kind, where = "uri", redact(uri)
    elif not create and record is None and not (state / EMBEDDED_DIR).exists():
        collection, client = _memory_collection()
        kind, where = "no store yet", "a dry run creates none"
    elif not create and record is not None:
        collection, client = connect(record.uri)
        kind, where = "mongod", f"{record.uri} (pid {record.pid})"
    elif shutil.which("mongod") and (create or record is not None):
        record = start_mongod(state)
        collection, client = connect(record.uri)
        kind, where = "mongod", f"{record.uri} (pid {record.pid})"
    else:
        path = state / EMBEDDED_DIR
        collection, client = embedded_collection(path)
        kind, where = "embedded", str(path)
    try:
        yield OpenedStore(SubscriberStore(collection), kind, where)
    finally:
        client.close()
        if kind == "embedded":
            private_tree(state / EMBEDDED_DIR)  # files montydb created under the umask
