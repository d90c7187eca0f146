"""The scaler's observation: 5 normalised metrics over the last 5 periods (25 floats)."""

from __future__ import annotations

from collections import deque

import numpy as np

from testbed.metrics.window import WindowMetrics
from testbed.profiles.paper import HISTORY, TRACE_MAX_RPS
from testbed.scaler.actions import Mask, mask_code

METRICS = ("request_rate", "utilization", "action_mask", "slo_violation_rate", "instances")
N_METRICS = len(METRICS)


def latest(observation: np.ndarray, metric: str, history: int = HISTORY) -> float:
    """The newest value of `metric` in an observation laid out metric-major, oldest first."""
    return float(observation[METRICS.index(metric) * history + history - 1])


class StateBuilder:
    """Turns successive WindowMetrics into observations; the same for sim, local testbed and lab.

    Layout: observation[m * history + h], metric m in METRICS order, h = history - 1 the newest.
    Request rate is divided by `max_rate` (the trace maximum) and capped at 1; instances by total
    units. Before `history` periods have been seen, the first one is repeated.
    """

    def __init__(self, max_rate: float = TRACE_MAX_RPS, history: int = HISTORY):
        self.max_rate = max_rate
        self.history = history
        self._rows: deque[tuple[float, ...]] = deque(maxlen=history)

    def reset(self) -> None:
        self._rows.clear()

    def row(self, window: WindowMetrics, mask: Mask, instances: int, total_units: int) -> tuple[float, ...]:
        rate = min(window.request_rate / self.max_rate, 1.0) if self.max_rate > 0 else 0.0
        return (
            rate,
            min(max(window.utilization, 0.0), 1.0),
            mask_code(mask),
            min(window.slo_violation_rate, 1.0),
            min(instances / total_units, 1.0),
        )

    def push(self, window: WindowMetrics, mask: Mask, instances: int, total_units: int) -> np.ndarray:
        """Add one period and return the observation (float32, 25 values)."""
        row = self.row(window, mask, instances, total_units)
        if not self._rows:
            self._rows.extend([row] * (self.history - 1))
        self._rows.append(row)
        return np.asarray(self._rows, dtype=np.float32).T.reshape(-1)
