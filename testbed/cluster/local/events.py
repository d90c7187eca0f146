"""What happened to a LocalCluster's replicas, as ClusterEvents: kept in order, logged, and handed
to the caller's `on_event`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from testbed.cluster.local.replicas import ReplicaProcess

# The name the cluster has always logged under, so log filters and captures keep working.
log = logging.getLogger("testbed.cluster.local")


@dataclass(frozen=True)
class ClusterEvent:
    t: float  # epoch seconds
    service: str
    replica: str
    kind: str  # started, ready, draining, stopped, died, replaced, failed_to_start, connection_lost
    detail: str = ""


class EventLog:
    """Every ClusterEvent in order (`events`); each is logged and passed to `on_event`."""

    def __init__(self, on_event: Callable[[ClusterEvent], None] | None = None) -> None:
        self.events: list[ClusterEvent] = []
        self.on_event = on_event

    def replica(self, r: ReplicaProcess, kind: str, detail: str = "") -> None:
        """An event of one replica, stamped now."""
        self.record(ClusterEvent(time.time(), r.service, r.name, kind, detail))

    def record(self, ev: ClusterEvent) -> None:
        self.events.append(ev)
        log.info("%s %s %s", ev.replica, ev.kind, ev.detail)
        if self.on_event is not None:
            self.on_event(ev)
