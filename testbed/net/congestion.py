"""The TCP congestion control of the testbed's namespaces, set rather than inherited.

A new network namespace takes the kernel's default algorithm (CUBIC on most distributions, BBR on
some), and a namespace other than the host's may only be given one the host allows
(`net.ipv4.tcp_allowed_congestion_control`). `allowed_while_building` widens that list for as
long as the namespaces are set up and restores it after: an algorithm set as a namespace's
default stays its default.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed.errors import MissingRequirement
from testbed.net.cmd import Runner

SYSCTL = Path("/proc/sys/net/ipv4")


def available(sysctl: Path = SYSCTL) -> list[str]:
    return (sysctl / "tcp_available_congestion_control").read_text().split()


@contextmanager
def allowed_while_building(algorithm: str | None, runner: Runner | None = None,
                           sysctl: Path = SYSCTL) -> Iterator[None]:
    """Within the block, namespaces may set `algorithm` (None: nothing to do). Loads its module
    when the kernel has not yet (`tcp_bbr`); a kernel without it is a missing requirement."""
    if algorithm is None:
        yield
        return
    if algorithm not in available(sysctl):
        (runner or Runner()).run(["modprobe", f"tcp_{algorithm}"], check=False)
        if algorithm not in available(sysctl):
            raise MissingRequirement(
                f"link.tcp_congestion: this kernel has no TCP congestion control {algorithm!r} "
                f"(it has: {', '.join(available(sysctl))})")
    allowed_file = sysctl / "tcp_allowed_congestion_control"
    allowed = allowed_file.read_text().split()
    if algorithm in allowed:
        yield
        return
    allowed_file.write_text(" ".join([*allowed, algorithm]))
    try:
        yield
    finally:
        allowed_file.write_text(" ".join(allowed))
