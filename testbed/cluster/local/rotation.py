"""The wiring between a LocalCluster and its in-process load balancer: replicas put in and taken
out of rotation, and the balancer's failures and lost connections recorded as cluster events."""

from __future__ import annotations

import asyncio
import contextlib
import time

from testbed.cluster.local.events import ClusterEvent, EventLog
from testbed.cluster.local.replicas import ReplicaProcess, ReplicaTable
from testbed.metrics.balancer import LoadBalancer


class BalancerRotation:
    """Which replicas `lb` sends requests to. The balancer itself (start, aclose, endpoints,
    metrics) stays the cluster's `lb`."""

    def __init__(self, lb: LoadBalancer, table: ReplicaTable, events: EventLog) -> None:
        self.lb = lb
        self._table = table
        self._events = events
        for sb in lb.services.values():
            sb.on_failure = self._on_failure
            sb.on_lost = self._on_lost_connection

    def add(self, r: ReplicaProcess) -> None:
        self.lb.services[r.service].add(r.name, r.url)

    def take_out(self, r: ReplicaProcess) -> None:
        self.lb.services[r.service].take_out(r.name)

    def forwarding(self, r: ReplicaProcess) -> bool:
        """Whether the balancer has requests on their way to or at `r`."""
        b = self.lb.services[r.service].backends.get(r.name)
        return b is not None and b.in_flight > 0

    async def forwards_answered(self, r: ReplicaProcess) -> None:
        """Once `r` (taken out) has answered what the balancer sent it; at most the balancer's
        upstream timeout."""
        sb = self.lb.services[r.service]
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(sb.forwards_answered(r.name), sb.upstream_timeout_s)

    def lost_connections(self) -> dict[str, int]:
        return {s: sb.lost_connections for s, sb in self.lb.services.items()}

    def _on_failure(self, service: str, replica: str) -> None:
        # The balancer saw the connection fail; the process watcher confirms a death and replaces it.
        for r in self._table.by_service[service]:
            if r.name == replica:
                self._events.replica(r, "unreachable", "taken out of rotation by the load balancer")

    def _on_lost_connection(self, service: str, when: str) -> None:
        """A client closed its connection (normal during a run): one event, no console output."""
        self._events.record(ClusterEvent(time.time(), service, "-", "connection_lost",
                                         f"client closed its connection {when}"))
