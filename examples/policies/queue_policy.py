"""A scaling policy of one's own: scale on the replicas' queue. It reads the newest window by name
(`observe(window)` is called before every `act`) rather than the 30 normalised numbers."""

from __future__ import annotations

import numpy as np

from testbed.metrics.window import WindowMetrics
from testbed.scaler.actions import action_index  # replicas to add (-2..+2) -> the action's index


class QueuePolicy:
    """+1 replica when more than `high` requests wait per replica, -1 when fewer than `low` do."""

    name = "queue"

    def __init__(self, service: str = "", total_units: int = 8, high: float = 2.0, low: float = 0.2):
        self.service, self.total_units, self.high, self.low = service, total_units, high, low
        self.waiting_per_replica = 0.0

    def observe(self, window: WindowMetrics) -> None:
        self.waiting_per_replica = window.queue_length / max(window.instances, 1)

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> int:
        if self.waiting_per_replica > self.high and action_mask[action_index(1)]:
            return action_index(1)
        if self.waiting_per_replica < self.low and action_mask[action_index(-1)]:
            return action_index(-1)
        return action_index(0)
