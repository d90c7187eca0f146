"""InterferenceTuner's read-back (probe): what a replica reports is compared with what it was
told only once the tell has been answered, and read again when a neighbour's change told it
something new during the read; a tell that fails is tried again. The replica HTTP client here is
a fake that answers a tell late, or times out on the first ones."""

from __future__ import annotations

import asyncio

import pytest

from testbed.cluster.local.events import EventLog
from testbed.cluster.local.interference import InterferenceTuner
from testbed.cluster.local.replicas import ReplicaProcess, ReplicaTable
from testbed.profiles import default_profiles


class FakeSlowReplicaClient:
    """Stands in for ReplicaClient: a tell (set_config) takes `tell_s` to reach the replica, and
    /healthz answers at once with what the replica has."""

    timeout_s = 2.0
    is_open = True

    def __init__(self, tell_s: float, timeouts: int = 0) -> None:
        self.tell_s = tell_s
        self.timeouts = timeouts  # this many tells, the first ones, time out
        self.has: dict[str, tuple[int, float]] = {}
        self.on_health = None  # called before each /healthz answer

    async def set_config(self, url: str, batch: int, stretch: float) -> None:
        await asyncio.sleep(self.tell_s)
        if self.timeouts:
            self.timeouts -= 1
            raise asyncio.TimeoutError
        self.has[url] = (batch, stretch)

    async def health(self, url: str) -> dict:
        if self.on_health is not None:
            self.on_health()
        batch, stretch = self.has.get(url, (1, 1.0))
        return {"share_pct": 25.0, "batch": batch, "stretch": stretch}


def _two_on_one_gpu(timeouts: int = 0
                    ) -> tuple[ReplicaTable, InterferenceTuner, FakeSlowReplicaClient, EventLog]:
    table = ReplicaTable(["chatbot", "imgcls"])
    for service in table.names:
        table.by_service[service].append(ReplicaProcess(service, f"{service}-1", state="ready",
                                                        url=f"http://{service}-1"))
    client = FakeSlowReplicaClient(tell_s=0.2, timeouts=timeouts)
    events = EventLog()
    return table, InterferenceTuner(table, default_profiles(), True, client, events), client, events


def _mismatched(rows: list[dict]) -> list[str]:
    return [r["replica"] for r in rows
            if "error" in r or r["stretch"] != pytest.approx(r["stretch_set"])
            or r["batch"] != r["batch_set"]]


def test_a_probe_waits_for_the_tells_on_their_way():
    async def main():
        table, tuner, _, _ = _two_on_one_gpu()
        tuner.refresh(tell=True)  # both now press each other: stretch > 1, told, 0.2 s away
        rows = await tuner.probe()
        return table, rows

    table, rows = asyncio.run(main())
    assert [r["stretch_set"] for r in rows] == [r.stretch for r in table.every()]
    assert all(r["stretch_set"] > 1.0 for r in rows)
    assert _mismatched(rows) == []


def test_a_probe_reads_again_when_a_neighbour_changed_during_its_read():
    async def main():
        table, tuner, client, _ = _two_on_one_gpu()
        tuner.refresh(tell=True)
        await asyncio.sleep(0.3)  # told

        def neighbour_exits():  # chatbot's replica goes while imgcls's is being read
            client.on_health = None
            table.by_service["chatbot"][0].state = "stopped"
            tuner.refresh(tell=True)

        client.on_health = neighbour_exits
        return await tuner.probe()

    rows = asyncio.run(main())
    assert [(r["replica"], r["stretch_set"]) for r in rows] == [("imgcls-1", 1.0)]
    assert _mismatched(rows) == []


def test_a_probe_that_never_settles_returns_its_last_read():
    async def main():
        table, tuner, client, _ = _two_on_one_gpu()
        tuner.refresh(tell=True)
        await asyncio.sleep(0.3)
        flips = 0

        def neighbour_flips():  # chatbot's replica comes and goes at every read
            nonlocal flips
            flips += 1
            r = table.by_service["chatbot"][0]
            r.state = "stopped" if r.state == "ready" else "ready"
            tuner.refresh(tell=True)

        client.on_health = neighbour_flips
        rows = await tuner.probe(tries=3)
        return rows, flips

    rows, flips = asyncio.run(main())
    assert rows and flips >= 3


def test_a_tell_that_timed_out_is_tried_again_and_one_that_keeps_failing_is_an_event():
    async def main(timeouts: int):
        table, tuner, _, events = _two_on_one_gpu(timeouts)
        tuner.refresh(tell=True)
        rows = await tuner.probe()
        return rows, [e.kind for e in events.events], {r.name: r.told for r in table.every()}

    rows, kinds, _ = asyncio.run(main(timeouts=2))  # each replica's first tell times out
    assert _mismatched(rows) == [] and kinds == []
    rows, kinds, told = asyncio.run(main(timeouts=6))  # three tries each, all time out
    assert sorted(_mismatched(rows)) == ["chatbot-1", "imgcls-1"]
    assert kinds == ["config_failed"] * 2 and told == {"chatbot-1": None, "imgcls-1": None}
