"""A latency policy of one's own: keep the 95th percentile under the SLO, with hysteresis. It reads
the newest window by name (`observe(window)` is called before every `act`): its p95 latency and
the SLO of the service's profile, which the window carries, so nothing is hard-coded.

The window's latency runs from a request's arrival at the service, its upload over the UE's
slice included: in a network fade it grows though the service is not the cause, and scaling out
does not help. `without_upload=True` (a scenario's `policy_args: {without_upload: true}`) takes
the window's mean upload time off the p95 first (on the local testbed, which measures it)."""

from __future__ import annotations

import numpy as np

from testbed.metrics.window import WindowMetrics
from testbed.scaler.actions import action_index  # replicas to add (-2..+2) -> the action's index


class SloPolicy:
    """+1 replica when the window's p95 latency passes `high` x the SLO, -1 when it is under
    `low` x the SLO and nothing waits."""

    name = "slo-p95"

    def __init__(self, high: float = 0.8, low: float = 0.3, without_upload: bool = False):
        self.high, self.low, self.without_upload = high, low, without_upload
        self.window: WindowMetrics | None = None

    def observe(self, window: WindowMetrics) -> None:
        self.window = window

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> int:
        w = self.window
        if w is None or w.p95_latency_ms is None or w.slo_ms is None:
            return action_index(0)  # nothing served yet: hold
        p95 = w.p95_latency_ms
        if self.without_upload and w.mean_upload_ms is not None:
            p95 = max(0.0, p95 - w.mean_upload_ms)
        if p95 > self.high * w.slo_ms and action_mask[action_index(1)]:
            return action_index(1)
        if p95 < self.low * w.slo_ms and not w.queue_length \
                and action_mask[action_index(-1)]:
            return action_index(-1)
        return action_index(0)
