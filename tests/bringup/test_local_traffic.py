"""LocalTraffic as the owner of its client processes: leaving `async with` stops them (SIGINT, so
they flush), `stop()` twice is harmless. A real process (`sleep`) stands in for a `testbed load`
client, placed where `start_clients` puts its processes, so no root or namespace is needed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from testbed.bringup.traffic import LocalTraffic
from testbed.load.traffic import ClientJob
from tests.conftest import default_sigint


async def _cell(traffic: LocalTraffic, started: list[asyncio.subprocess.Process], tmp_path: Path,
                *, fail: bool) -> None:
    job = ClientJob(0, "imgcls", "ai", "http://10.0.0.1:8000", tmp_path / "imgcls-ai-0.jsonl")
    async with traffic:
        # `sleep` stands in for a client, which sets its own SIGINT handler
        started.append(await asyncio.create_subprocess_exec("sleep", "60", preexec_fn=default_sigint))
        traffic._procs.append((job, started[-1]))
        assert traffic.clients_running()
        if fail:
            raise RuntimeError("the cell failed")


def test_leaving_async_with_by_an_exception_stops_the_clients(tmp_path: Path):
    started: list[asyncio.subprocess.Process] = []
    with pytest.raises(RuntimeError, match="the cell failed"):
        asyncio.run(_cell(LocalTraffic(None, tmp_path), started, tmp_path, fail=True))
    assert started[0].returncode == -2  # SIGINT, as a client is stopped so that it flushes


def test_stop_twice_is_harmless(tmp_path: Path):
    async def main() -> tuple[int | None, list[str], bool]:
        traffic = LocalTraffic(None, tmp_path)
        started: list[asyncio.subprocess.Process] = []
        await _cell(traffic, started, tmp_path, fail=False)
        again = await traffic.stop()
        return started[0].returncode, again, traffic.clients_running()

    assert asyncio.run(main()) == (-2, [], False)


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a process's priority needs root")
def test_a_client_runs_ahead_of_the_cell():
    import subprocess

    from testbed.bringup.traffic import CLIENT_PRIORITY_AHEAD, ahead_of_the_cell

    own = os.getpriority(os.PRIO_PROCESS, 0)
    child = subprocess.Popen(["sleep", "30"])
    try:
        ahead_of_the_cell(child.pid)
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == max(-20, own - CLIENT_PRIORITY_AHEAD)
    finally:
        child.kill()
        child.wait()
