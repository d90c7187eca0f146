"""A start gate for several load clients: each says it is ready (a file `GATE.ready.PID-TOKEN`) and
waits until whoever started them writes the epoch second their schedules begin into GATE.
Clients that start at different speeds (an interpreter, imports, content: 0.5 s on a quiet
machine, seconds on a busy one) then begin one schedule together, and none begins late."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from pathlib import Path

GATE_POLL_S = 0.005  # how often a waiting client looks at the gate
GATE_TIMEOUT_S = 300.0  # a client whose gate never opens gives up


async def wait_at_gate(gate: str | Path, timeout_s: float = GATE_TIMEOUT_S) -> float:
    """Say this process is ready at `gate`, then wait until the gate holds an epoch second;
    return it, and take the ready mark back. TimeoutError after `timeout_s`."""
    gate = Path(gate)
    mark = Path(f"{gate}.ready.{os.getpid()}-{secrets.token_hex(4)}")
    mark.touch()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                return float(gate.read_text())
            except (FileNotFoundError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{gate}: not opened within {timeout_s:g} s")
            await asyncio.sleep(GATE_POLL_S)
    finally:
        mark.unlink(missing_ok=True)  # counted only before the gate opens; then clutter


def ready_at_gate(gate: str | Path) -> int:
    """How many clients have said they are ready at `gate`."""
    gate = Path(gate)
    return sum(1 for _ in gate.parent.glob(f"{gate.name}.ready.*"))


def open_gate(gate: str | Path, start_at: float) -> None:
    """Open `gate` (the gate file): write `start_at`, the epoch second the clients begin at, at
    once for every reader (a rename)."""
    gate = Path(gate)
    tmp = gate.with_name(gate.name + ".tmp")
    tmp.write_text(f"{start_at:.6f}")
    tmp.replace(gate)
