"""Each LocalCluster replica's interference stretch and batch size: recomputed from the placement,
told to ready replicas (POST /_config) when they change, and read back from them (probe)."""

from __future__ import annotations

import asyncio

from testbed.cluster.local.client import UNREACHABLE, ReplicaClient
from testbed.cluster.local.events import EventLog
from testbed.cluster.local.replicas import ReplicaProcess, ReplicaTable
from testbed.profiles import ServiceProfile, gpu_stretches

TELL_TRIES = 3
TELL_RETRY_S = 0.5  # wall time between a failed tell and the next try


class InterferenceTuner:
    """With `interference=True` each replica's processing time is stretched by InSS's interference
    term for the replicas beside it on its GPU (`gpu_stretches`, the profile's curve the simulator
    uses too); otherwise every stretch is 1."""

    def __init__(self, table: ReplicaTable, profiles: dict[str, ServiceProfile], interference: bool,
                 client: ReplicaClient, events: EventLog) -> None:
        self.interference = interference
        self._table = table
        self._profiles = profiles
        self._client = client
        self._events = events
        self._tells: set[asyncio.Task[None]] = set()
        self._told = 0  # tells started, ever: a probe that saw one start reads again

    def _pressing(self) -> list[ReplicaProcess]:
        """Replicas that run kernels on their GPU: ready ones, and draining ones until they exit
        (a starting one presses nobody yet, as in the simulator)."""
        return [r for r in self._table.every() if r.state in ("ready", "draining")]

    def stretch_of(self, r: ReplicaProcess, pressing: list[ReplicaProcess] | None = None) -> float:
        """1 + the interference `r` suffers from the replicas pressing on its GPU (all of them
        unless `pressing` names them)."""
        if not self.interference:
            return 1.0
        others = [x for x in (self._pressing() if pressing is None else pressing) if x is not r]
        placed = [(x.name, x.gpu, x.share, self._profiles[x.service].gpu) for x in [*others, r]]
        return gpu_stretches(placed)[r.name]

    def refresh(self, tell: bool) -> None:
        """Recompute every live replica's stretch from the placement; with `tell`, tell each ready
        replica whose batch or stretch differs from what it has."""
        pressing = self._pressing()
        for r in self._table.live():
            r.stretch = self.stretch_of(r, pressing)
        if not tell or not self._client.is_open:
            return
        for r in self._table.every():
            want = (self._table.batch[r.service], r.stretch)
            if r.state == "ready" and r.url and r.told != want:
                r.told = want
                self._told += 1
                task = asyncio.get_running_loop().create_task(self._tell(r, *want))
                self._tells.add(task)
                task.add_done_callback(self._tells.discard)

    async def _tell(self, r: ReplicaProcess, batch: int, stretch: float) -> None:
        """Tell `r` its batch and stretch; a failed tell is tried again TELL_TRIES times in all, while
        `r` is ready and nothing newer was told: a replica left on its old stretch until the next
        change ran it for a whole scaler period (a tell timed out on a busy machine)."""
        for attempt in range(1, TELL_TRIES + 1):
            try:
                await self._client.set_config(r.url, batch, stretch)
                return
            except (*UNREACHABLE, RuntimeError) as exc:
                if r.state != "ready" or r.told != (batch, stretch):
                    return  # it went away, or has a newer tell on its way: it needs nothing
                if attempt == TELL_TRIES:
                    r.told = None  # the next change tries again
                    self._events.replica(r, "config_failed", f"batch {batch}, stretch {stretch:.4f}: "
                                         f"{str(exc) or type(exc).__name__} ({TELL_TRIES} tries)")
                    return
            await asyncio.sleep(TELL_RETRY_S)

    async def probe(self, tries: int = 3) -> list[dict[str, object]]:
        """What each ready replica reports (GET /healthz) beside what the cluster set for it:
        share, batch and interference stretch. Read once the tells on their way are answered, and
        read again (up to `tries` times) if a replica changed meanwhile and was told something new:
        a replica that became ready or exited just before changes its neighbours' stretch."""
        rows: list[dict[str, object]] = []
        for _ in range(tries):
            if self._tells:  # tried TELL_TRIES times at most
                await asyncio.wait(set(self._tells),
                                   timeout=TELL_TRIES * (self._client.timeout_s + TELL_RETRY_S))
            told = self._told
            rows = await self._read_back()
            if self._told == told and not self._tells:
                break
        return rows

    async def _read_back(self) -> list[dict[str, object]]:
        if not self._client.is_open:
            return []
        ready = [r for r in self._table.every() if r.state == "ready" and r.url]

        async def one(r: ReplicaProcess) -> dict[str, object]:
            row: dict[str, object] = {"service": r.service, "replica": r.name, "gpu": r.gpu,
                                      "share_set": r.share, "batch_set": self._table.batch[r.service],
                                      "stretch_set": r.stretch}
            try:
                doc = await self._client.health(r.url)
                row.update(share=doc.get("share_pct"), batch=doc.get("batch"), stretch=doc.get("stretch"))
            except (*UNREACHABLE, ValueError) as exc:
                row["error"] = str(exc) or type(exc).__name__
            return row

        return list(await asyncio.gather(*(one(r) for r in ready)))
