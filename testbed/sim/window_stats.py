"""Per-window statistics of a served chunk: the sampled utilization, the served requests' latency
percentiles, and the instances ready at each window's end."""

from __future__ import annotations

from collections.abc import Sequence
from math import ceil

import numpy as np

from testbed.metrics.window import latency_percentiles
from testbed.sim.windows import window_of


def ready_by_window(instances: Sequence, t0: float, step: float, steps: int) -> list[int]:
    """Instances (not draining) of `instances` ready at the end of each of the `steps` windows of
    `step` seconds from `t0`."""
    ready_at = [inst.ready_at for inst in instances if not inst.draining]
    if all(r <= t0 + step for r in ready_at):  # all ready by the first window's end
        return [len(ready_at)] * steps
    ends = t0 + step * np.arange(1, steps + 1)
    ready = np.zeros(steps, dtype=np.int64)
    for r in ready_at:
        ready += ends >= r
    return ready.tolist()


def served_percentiles(t0: float, step: float, steps: int, a: np.ndarray, finish: np.ndarray,
                       done_in: tuple[np.ndarray, np.ndarray], *, completion: bool) -> list[dict]:
    """Each window's latency percentiles over the requests it counts as served (as the service
    counts them: by completion, with `done_in` (finish, latency) carried in from the chunk before,
    or by arrival). `a`, `finish`: the chunk's arrivals and finish times (NaN: dropped), in the
    `steps` windows of `step` seconds from `t0`."""
    ok = finish == finish
    if completion:
        f_all = np.concatenate((done_in[0], finish[ok]))
        latency = np.concatenate((done_in[1], finish[ok] - a[ok]))
        w = window_of(f_all, t0, step)
    else:
        w = np.minimum(window_of(a[ok], t0, step), steps - 1)
        latency = finish[ok] - a[ok]
    keep = w < steps
    order = np.lexsort((latency[keep], w[keep]))
    w, latency = w[keep][order], 1000.0 * latency[keep][order]
    edges = np.searchsorted(w, np.arange(steps + 1))
    return [latency_percentiles(latency[edges[i]:edges[i + 1]]) for i in range(steps)]


def busy_samples(a_ok: np.ndarray, f_ok: np.ndarray, mine: np.ndarray,
                 start_pending: list[list[float]], *, instances: int, origin: float, samples: int,
                 capacity: int) -> np.ndarray:
    """Per instance (a row each of `instances`) and utilization sample (`samples` of them, one a
    second from `origin`): min(in_flight, capacity) / capacity. `a_ok`, `f_ok`, `mine`: arrival,
    finish and instance of the served requests; `start_pending`: per instance, the finish times
    of what it held when the chunk began.

    Samples at t0, t0 + 1 s, ... as the published simulator's monitor (simpy_env.py:75-83,
    a tick every 1000 ms from time 0): a request arriving at the very sample instant is not
    yet in, one finishing at it still is (its monitor tick comes first in SimPy's order)."""
    n_samples, cap, m = samples, capacity, instances
    # In flight at sample j: arrived at or before it and not finished by it. A time x counts
    # from the first sample at or after it, index ceil(x - first sample); times are whole
    # milliseconds, 1e-6 s off any sample, so the ceiling never sits on a rounding edge.
    # One bincount per kind over (instance, sample) then a running sum replaces a search
    # per instance.
    enter = np.ceil(a_ok - origin).astype(np.int64)
    leave = np.minimum(np.ceil(f_ok - origin).astype(np.int64), n_samples)
    width = n_samples + 1
    if m > 1:  # one row of samples per instance
        row = mine * width
        enter += row
        leave += row
    delta = np.bincount(enter, minlength=m * width)
    delta -= np.bincount(leave, minlength=m * width)
    for k, held in enumerate(start_pending):  # a few requests: Python, not a dozen numpy calls
        if held:
            delta[k * width] += len(held)  # in flight from the first sample of its row
            for f in held:  # until the first sample at or after its finish (in the row)
                gone = ceil(f - origin)
                delta[k * width + (0 if gone < 0 else n_samples if gone > n_samples else gone)] -= 1
    in_flight = np.cumsum(delta.reshape(m, width)[:, :n_samples], axis=1)
    return np.minimum(in_flight, cap) / cap if cap != 1 else np.minimum(in_flight, 1)


def mean_utilization(busy: np.ndarray, instances: Sequence, t0: float, step: float, steps: int, *,
                     sample_phase: float, counts_starting: bool, summed: bool = False) -> np.ndarray:
    """Per window, the mean utilization of the `busy` samples (instance by sample, each the
    fraction of its capacity in use; `summed`: one row, already summed over the instances that
    count), over `instances`, in the `steps` windows of `step` seconds from `t0`, the samples
    `sample_phase` s after each whole second.

    `sample_phase` moves the samples later within each second (0.5: mid-second, as this
    simulator did before; the published client's gaps then put an arrival on many samples).

    With `counts_starting` (default) the count is every instance holding units and not
    draining, starting ones included (they serve nothing, so they pull the mean down), as in
    the dissertation's own simulator (`sum(count) / (num_inst * capacity)`, num_inst counting
    instances still starting) and its testbed query (sum over pods / running pods). Without
    it, only ready instances count and draining ones count until they are gone."""
    per_window = round(step)
    n_samples = steps * per_window
    if counts_starting:
        # the same instances count at every sample: sum their rows, divide by their number
        # (leaving out rows of zeros changes no bit of the running sum over instances)
        alive = [k for k, inst in enumerate(instances) if not inst.draining]
        if not alive:
            return np.zeros(steps)
        if summed:
            total = busy[0]
        else:
            total = busy.sum(axis=0) if len(alive) == len(busy) else busy[alive].sum(axis=0)
        frac = (total / len(alive)).reshape(steps, per_window)
        return frac.sum(axis=1) / per_window
    samples = t0 + sample_phase + np.arange(n_samples, dtype=np.float64) - 1e-6
    ready_at = np.array([inst.ready_at for inst in instances])[:, None]
    removed = np.array([np.inf if inst.removed_at is None else inst.removed_at
                        for inst in instances])[:, None]
    alive = (samples + 2e-6 >= ready_at) & (samples < removed)
    total = np.where(alive, busy, 0.0).sum(axis=0)
    present = alive.sum(axis=0)
    total = total.reshape(steps, per_window)
    present = present.reshape(steps, per_window)
    seen = present > 0
    frac = np.divide(total, present, out=np.zeros_like(total), where=seen)
    counted = seen.sum(axis=1)
    return np.divide(frac.sum(axis=1), counted, out=np.zeros(steps), where=counted > 0)
