"""The start gate: clients that become ready at different moments begin at the one epoch second
the gate gives once all have said they are ready, so the slowest to start is not late."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from testbed.load.gate import open_gate, ready_at_gate, wait_at_gate


def test_clients_ready_at_different_moments_begin_at_the_second_the_gate_gives(tmp_path: Path):
    gate = tmp_path / "start-gate"

    async def client(ready_after_s: float) -> tuple[float, float]:
        await asyncio.sleep(ready_after_s)  # a slow start: imports, content
        start_at = await wait_at_gate(gate)
        return start_at, time.time()

    async def main():
        tasks = [asyncio.create_task(client(d)) for d in (0.0, 0.3)]
        while ready_at_gate(gate) < 2:
            await asyncio.sleep(0.01)
        opened = time.time() + 0.1
        open_gate(gate, opened)
        return opened, await asyncio.gather(*tasks)

    opened, seen = asyncio.run(main())
    assert [s for s, _ in seen] == [pytest.approx(opened, abs=1e-6)] * 2
    # each learnt it before the moment came: the slow one is not late
    assert all(at < s for s, at in seen), seen
    # the ready marks are spent once the gate opens: none is left in the run dir
    assert sorted(p.name for p in tmp_path.iterdir()) == ["start-gate"]


def test_a_gate_never_opened_times_out(tmp_path: Path):
    with pytest.raises(TimeoutError, match="not opened"):
        asyncio.run(wait_at_gate(tmp_path / "start-gate", timeout_s=0.05))
    assert list(tmp_path.iterdir()) == []
