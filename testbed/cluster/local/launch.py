"""How a LocalCluster starts one replica process: its command line, environment, profile file
and log file."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from testbed import plugins
from testbed.clock import ScenarioClock
from testbed.cluster.local.replicas import ReplicaProcess
from testbed.cluster.replica import TOKEN_ENV
from testbed.profiles import ServiceProfile


class ReplicaLauncher:
    """Starts replica processes of the profiles' services. Owns what they share: each service's
    profile file, the log files (one per replica, under `log_dir` if given) and the /_config
    token in their environment; `with ReplicaLauncher(...):` or `close()` (safe twice) removes
    the profile files and closes the logs."""

    def __init__(self, profiles: dict[str, ServiceProfile], token: str, *, clock: ScenarioClock,
                 replica_host: str, use_espeak: bool, log_dir: Path | None,
                 sleep_only: bool = False) -> None:
        self._profiles = profiles
        self._token = token
        self.clock = clock
        self.replica_host = replica_host
        self.use_espeak = use_espeak
        self.sleep_only = sleep_only
        self.log_dir = log_dir
        self._logs: list[IO[bytes]] = []
        self._profile_files: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> ReplicaLauncher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fh in self._logs:
            fh.close()
        if self._profile_files is not None:
            self._profile_files.cleanup()
            self._profile_files = None

    @property
    def connect_host(self) -> str:
        """Where this process reaches a replica listening on `replica_host`."""
        return "127.0.0.1" if self.replica_host in ("0.0.0.0", "") else self.replica_host

    def command(self, r: ReplicaProcess, batch: int, seed: int) -> list[str]:
        """The replica's command line; batch, share and stretch only where not the defaults."""
        args = [
            sys.executable,
            "-m",
            "testbed.cluster.serving",
            "--service",
            r.service,
            "--profile-file",
            self._profile_file(r.service),
            "--host",
            self.replica_host,
            *self.clock.argv(),
            "--seed",
            str(seed),
            "--parent-pid",
            str(os.getpid()),
            "--launched-at",
            repr(time.time()),
        ]
        if not self.use_espeak:
            args.append("--no-espeak")
        if self.sleep_only:
            args.append("--sleep-only")
        if r.warm:
            args.append("--warm")
        if batch != 1 or r.share != 25.0:
            args += ["--batch", str(batch), "--share", repr(r.share)]
        if r.stretch != 1.0:
            args += ["--stretch", repr(r.stretch)]
        return args

    def log_for(self, r: ReplicaProcess) -> IO[bytes] | int:
        """Where the replica's stderr goes: its own log file under `log_dir`, else nowhere."""
        if self.log_dir is None:
            return asyncio.subprocess.DEVNULL
        self.log_dir.mkdir(parents=True, exist_ok=True)
        fh = (self.log_dir / f"{r.name}.log").open("ab")
        self._logs.append(fh)
        return fh

    async def start(self, args: list[str], stderr: IO[bytes] | int) -> asyncio.subprocess.Process:
        """Start a replica's process; its stdout is a pipe, for its LISTENING line."""
        return await asyncio.create_subprocess_exec(
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            # no preexec_fn: the replica ties itself to this process (exit_with_parent), so that
            # Python vforks rather than forks this one, whose event loop serves the balancer
            env=_child_env(self._token),
        )  # Ctrl-C at a terminal reaches us, we stop replicas gracefully

    def _profile_file(self, service: str) -> str:
        """The service's profile as a file a replica reads (a command line of kilobytes of JSON
        is what `ps` would show otherwise); numbers only: sources stay in the profiles file."""
        if self._profile_files is None:
            self._profile_files = tempfile.TemporaryDirectory(prefix="testbed-profiles-")
        path = Path(self._profile_files.name) / f"{service}.json"
        if not path.exists():
            path.write_text(json.dumps(self._profiles[service].model_dump(exclude={"sources"})))
        return str(path)


def _child_env(token: str) -> dict[str, str]:
    # Replicas run the same testbed package as this process (a worktree copy, not an installed
    # one): the folder that holds the package (testbed/cluster/local/launch.py: three up)
    root = str(Path(__file__).resolve().parents[3])
    env = plugins.child_env()  # and the folders a service's handler is imported from
    env[TOKEN_ENV] = token
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
