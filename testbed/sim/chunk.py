"""A chunk of periods a service serves ahead (testbed.sim.service): its sub-chunks, each served by
one set of ready instances, each window's outcome (built when a step asks for it) and the
per-request results a scaling action rewinds from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from testbed.metrics.window import WindowMetrics


class StepOutcome(NamedTuple):
    """What the service did in one window, plus the sums the evaluator aggregates exactly (a
    named tuple: one is built per service and step, at a third of a frozen dataclass's cost)."""

    window: WindowMetrics
    served: int  # requests counted as served in the window (see SimService's slo_counting)
    dropped: int  # requests dropped on arrival in the window (full queue or rate limit)
    proc_time_sum_s: float  # summed latency of the served ones


class ChunkOutcomes:
    """Per-window counts of a chunk; a window's StepOutcome is built when it is asked for (a
    scaling action drops the rest of the chunk)."""

    def __init__(self, name: str, step: float, cols: tuple):
        """`cols`: per window, arrivals, served, dropped, slow, summed latency, utilization and
        ready instances."""
        self.name, self.step = name, step
        self.cols = cols
        self.n = len(cols[0])  # windows; read on every step, a method call dearer than the field
        self.queue: list[int | None] = [None] * self.n  # waiting at each end (None: not measured)
        self.percentiles: list[dict] | None = None  # p50/p95/p99 per window (None: not measured)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, w: int) -> StepOutcome:
        arrivals, served, dropped, slow, proc_sum, util, ready = self.cols
        n, acc, drop, ps = arrivals[w], served[w], dropped[w], proc_sum[w]
        window = WindowMetrics.fast(
            service=self.name,
            seconds=self.step,
            arrivals=n,
            completed=acc + drop,
            violations=drop + slow[w],
            utilization=util[w],
            instances=ready[w],
            mean_latency_ms=1000.0 * ps / acc if acc else None,
            queue_length=self.queue[w],
            dropped=drop,
        )
        if self.percentiles is not None:
            window.__dict__.update(self.percentiles[w])  # the fast window's fields, as fast() fills them
        return StepOutcome(window, acc, drop, ps)


@dataclass
class Chunk:
    """Results of serving [t0, t0 + len(outcomes)·step) with no scaling in between."""

    t0: float
    step: float
    i0: int  # first arrival index
    arrivals: np.ndarray
    finish: np.ndarray  # NaN = dropped
    owner: np.ndarray  # index into SimService.instances at chunk time, -1 = no ready instance
    start_pending: list[list[float]]
    subs: list[tuple[float, int, int, int]]  # (from time, first request, rr at start, targets)
    outcomes: ChunkOutcomes
    done_in: tuple[np.ndarray, np.ndarray]  # (finish, latency) of earlier requests not yet counted
    used: int = 0


@dataclass(frozen=True)
class SubChunk:
    """Arrivals [j0, j1) of a chunk, served by one set of ready instances: `targets` (their
    indices), the round-robin pointer `rr` at j0, the rate limit's `tokens` per instance and
    `pend`, each target's pending finish times (both updated by the serving)."""

    j0: int
    j1: int
    targets: list[int]
    rr: int
    tokens: dict[int, tuple[int, int]]
    pend: list[list[float]]
