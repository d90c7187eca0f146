"""The scaler's observation: 6 normalised metrics over the last 5 periods (30 floats).

OBSERVATION names the normalisation; a trained model records it and refuses another one.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from testbed.metrics.window import WindowMetrics
from testbed.profiles import default_profiles
from testbed.profiles.paper import HISTORY, TOTAL_UNITS, TRACE_MAX_RPS
from testbed.scaler.actions import Mask, mask_code

if TYPE_CHECKING:
    from testbed.profiles import ServiceProfile

METRICS = ("request_rate", "utilization", "action_mask", "slo_violation_rate", "instances", "unit_cost")
N_METRICS = len(METRICS)
OBSERVATION = "load-per-instance/reachable-instances/unit-cost/2"
_RING_SPAN = 256  # periods pushed before the ring copies its last rows back to the start
MAX_LOAD = 2.0  # the request-rate metric covers offered loads up to twice what the instances serve


def instance_rps(service: str) -> float | None:
    """Requests per second one instance of a registered `service` serves flat out (capacity / mean
    processing time, Table 4.4 for the paper's three), or None for a service the registry does not
    know. A loop over a profile of its own (a user's file) uses `profile_rps` on that profile."""
    profile = default_profiles().get(service)
    return None if profile is None else profile_rps(profile)


def profile_rps(profile: ServiceProfile) -> float | None:
    """Requests per second one instance with `profile` serves flat out: capacity / mean processing
    time (the same arithmetic, in the same order, for every caller: observations equal to the bit);
    None for a zero processing time (the rate is then divided by `max_rate`)."""
    lo, hi = profile.proc_time_ms
    return profile.capacity * 2000.0 / (lo + hi) if lo + hi > 0 else None


_INDEX = {m: i for i, m in enumerate(METRICS)}


@functools.cache
def _gather(history: int, ring_rows: int) -> np.ndarray:
    """Row p: the indices into the flattened period-major ring of the observation whose newest
    period is ring row p, metric-major (one fancy index: a fifth of a transposed copy's cost)."""
    periods = np.arange(ring_rows)[:, None, None] - (history - 1) + np.arange(history)[None, None, :]
    table = (periods * N_METRICS + np.arange(N_METRICS)[None, :, None]).reshape(ring_rows, -1)
    table.flags.writeable = False  # shared by every builder of this size
    return table


def latest_index(metric: str, history: int = HISTORY) -> int:
    """Where the newest value of `metric` sits in an observation laid out metric-major.

    metric: a name in STATE_METRICS; history: periods per metric in the observation."""
    return _INDEX[metric] * history + history - 1


def latest(observation: np.ndarray, metric: str, history: int = HISTORY) -> float:
    """The newest value of `metric` in an observation laid out metric-major, oldest first.

    observation: the policy's input; metric: a name in STATE_METRICS; history: periods per metric."""
    return float(observation[latest_index(metric, history)])


class StateBuilder:
    """Turns successive WindowMetrics into observations; the same for sim, local testbed and lab.

    Layout: observation[m * history + h], metric m in METRICS order, h = history - 1 the newest.
    Before `history` periods have been seen, the first one is repeated.

    The request rate is the offered load per instance: requests per second divided by what the
    instances serve flat out (instances x `instance_rps`), over MAX_LOAD and capped at 1. It is
    free of the cluster's size, so a policy trained at 8 units sees the same values at 128 units
    and 13x the load, where an absolute rate (the dissertation's min(1, requests / 1500) per
    30 s, or ours over the trace maximum) leaves everything it saw in training. Without
    `instance_rps` (a service with no profile) the rate is divided by `max_rate` and capped at 1.
    Instances are divided by the most instances the service could have now, its own plus those
    that fit in the free units ("the max possible number of instances", Section 3.2.1). Divided
    by the total units instead (the published simulator), 30 instances out of 128 read as 2 out
    of 8, with a mask that allows scaling down by two, a pair an agent trained at 8 units never
    saw. (The reward still prices an instance at 1/total units, Eq. 3.2.)

    The sixth metric is that price, the scale cue: TOTAL_UNITS / total units, capped at 1 (1 at
    the paper's 8 training units, 0.0625 at Table 5.3's 128), so that an agent trained over
    several pool sizes can hold more headroom where an instance is cheap.
    """

    def __init__(
        self,
        instance_rps: float | None = None,
        history: int = HISTORY,
        *,
        max_rate: float = TRACE_MAX_RPS,
    ):
        self.instance_rps = instance_rps
        self.max_rate = max_rate
        self.history = history
        # period-major ring: row p is one period; the observation is rows p-history+1..p,
        # transposed. Rows run on past the history so that a push shifts nothing.
        self._rows = np.zeros((history + _RING_SPAN, N_METRICS), dtype=np.float32)
        self._flat = self._rows.reshape(-1)  # a view
        self._gather = _gather(history, len(self._rows))
        self._at = history - 1
        self._empty = True
        self._unit_cost: dict[int, float] = {}  # total units -> the sixth metric

    @classmethod
    def for_service(cls, service: str) -> StateBuilder:
        """A builder for a registered service's default profile (None: divided by `max_rate`)."""
        return cls(instance_rps(service))

    @classmethod
    def for_profile(cls, profile: ServiceProfile) -> StateBuilder:
        """A builder for the profile in use (a user's file, a scenario's `service_profiles:`), so
        that the request-rate metric means load per instance for any service."""
        return cls(profile_rps(profile))

    def reset(self) -> None:
        """Forget the periods so far: the next push fills every history slot with its row."""
        self._empty = True

    def row(
        self, window: WindowMetrics, mask: Mask, instances: int, room: int, total_units: int = TOTAL_UNITS
    ) -> tuple[float, ...]:
        """One period's metrics; `room` = instances of this service that fit in the free units.

        Written out with the window's fields and conditionals instead of its properties and
        min/max: one row is built per decision. `b if x > b else x` is min(x, b) and
        `b if x < b else x` is max(x, b), NaN and signed zeros included.

        window: the period's metrics; mask: its action mask; instances: the service's instances;
        total_units: the cluster's units."""
        seconds, arrivals = window.seconds, window.arrivals
        request_rate = arrivals / seconds if seconds > 0 else 0.0
        if self.instance_rps:
            load = request_rate / ((1 if instances < 1 else instances) * self.instance_rps)
            rate = load / MAX_LOAD
            rate = 1.0 if rate > 1.0 else rate
        elif self.max_rate > 0:
            rate = request_rate / self.max_rate
            rate = 1.0 if rate > 1.0 else rate
        else:
            rate = 0.0
        util = window.utilization
        util = 0.0 if util < 0.0 else util
        util = 1.0 if util > 1.0 else util
        completed = window.completed
        slo = window.violations / completed if completed else 0.0
        slo = 1.0 if slo > 1.0 else slo
        reach = instances + (0 if room < 0 else room)
        cost = self._unit_cost.get(total_units)
        if cost is None:
            cost = self._unit_cost[total_units] = min(TOTAL_UNITS / max(total_units, 1), 1.0)
        return (rate, util, mask_code(mask), slo, instances / (1 if reach < 1 else reach), cost)

    def push(
        self, window: WindowMetrics, mask: Mask, instances: int, room: int, total_units: int = TOTAL_UNITS
    ) -> np.ndarray:
        """Add one period and return the observation (float32, 30 values, a new array).

        window, mask, instances, room, total_units: as `row` takes them."""
        row = self.row(window, mask, instances, room, total_units)
        rows, h = self._rows, self.history
        if self._empty:
            rows[:h] = row
            at = h - 1
            self._empty = False
        else:
            at = self._at + 1
            if at == len(rows):
                rows[: h - 1] = rows[at - h + 1 :]
                at = h - 1
            rows[at] = row
        self._at = at
        return self._flat[self._gather[at]]  # = rows[at - h + 1 : at + 1].T.flatten()
