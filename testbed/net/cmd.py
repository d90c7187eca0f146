"""Runs argument lists (never shell strings) and turns failures into readable errors."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence

from testbed.errors import MissingRequirement, TestbedError

Argv = Sequence[str]


class CommandFailed(TestbedError):
    def __init__(self, argv: Argv, returncode: int, stderr: str):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        super().__init__(f"`{' '.join(self.argv)}` failed ({returncode}): {self.stderr}")


class Runner:
    """Executes commands; the one place the data plane touches the kernel."""

    def run(self, argv: Argv, *, check: bool = True, timeout: float = 30.0,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                                  input=input, check=False)
        except FileNotFoundError:
            raise MissingRequirement(f"{argv[0]} not found: {install_hint(argv[0])}") from None
        if check and proc.returncode != 0:
            raise CommandFailed(argv, proc.returncode, proc.stderr)
        return proc

    def run_all(self, commands: Sequence[Argv]) -> None:
        for argv in commands:
            self.run(argv)


def in_ns(ns: str, argv: Argv) -> list[str]:
    """The argv that runs `argv` inside network namespace `ns`."""
    return ["ip", "netns", "exec", ns, *argv]


_HINTS = {
    "ip": "install iproute2 (apt-get install -y iproute2)",
    "tc": "install iproute2 (apt-get install -y iproute2)",
    "iperf3": "install iperf3 (apt-get install -y iperf3)",
    "ss": "install iproute2 (apt-get install -y iproute2)",
    "sysctl": "install procps (apt-get install -y procps)",
}


def install_hint(binary: str) -> str:
    return _HINTS.get(binary, f"install {binary} and make sure it is on PATH")


def require_root(what: str = "the local data plane") -> None:
    """A MissingRequirement unless this process runs as root (namespaces and tc need it).

    what: the command or part that needs it, as the message names it."""
    if os.geteuid() != 0:
        raise MissingRequirement(
            f"{what} needs root (network namespaces, tc): run it as root, e.g. `sudo testbed up`"
        )


def require_binaries(*names: str) -> None:
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        raise MissingRequirement(
            "; ".join(f"{n} not found: {install_hint(n)}" for n in missing)
        )


_PR_SET_PDEATHSIG = 1
try:  # resolved now: after fork only async-signal-safe work belongs in the child
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
except (OSError, AttributeError):
    _prctl = None


def exit_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """Called by a child at its start: get `sig` when `parent` dies, even by SIGKILL (Linux
    PR_SET_PDEATHSIG), and at once if it is gone already. In place of `die_with_parent` where the
    parent starts children while it serves: a `preexec_fn` makes Python fork the parent rather
    than vfork it, which held a runner's event loop 20-25 ms per replica started (vfork: 3-5)."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above
        os.kill(os.getpid(), sig)


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child get `sig` when this process dies, even by SIGKILL
    (Linux PR_SET_PDEATHSIG; it survives `ip netns exec`'s exec). The signal follows the thread
    that starts the child, so start children from a thread that outlives them. None elsewhere."""
    if _prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        _prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above
            os.kill(os.getpid(), sig)

    return preexec
