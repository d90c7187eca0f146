"""A chunk's counts (`SimService._outcomes`'s per-window columns, the requests left for a later
chunk and the busy samples) as numba-compiled loops, the counting half of `testbed.sim.compiled`.

As there, each loop repeats the numpy kernel it stands for with the same IEEE operations in the
same order (the bincounts' accumulation order), so a compiled count equals a numpy count to the bit.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from testbed.sim.windows import EPS

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _window(t: float, t0: float, step: float) -> int:
    return np.int64(math.floor((t - t0) / step + EPS))  # windows.window_of


@_jit
def _count_earlier(done, served, slow, proc_sum, later, frame):
    """Requests of earlier chunks that finish in this one's windows (completion counting), counted
    before this chunk's, as numpy concatenates them first; those finishing later still have their
    indices put in `later`, and their number is returned."""
    done_finish, done_latency = done.finish, done.latency
    t0, step, steps, slo = frame.t0, frame.step, frame.steps, frame.slo
    n_later = 0
    margin = 1e-3 * step
    lo, hi, w = np.inf, -np.inf, np.int64(0)  # finish times in [lo, hi) are in window w
    for i in range(len(done_finish)):
        f = done_finish[i]
        if not lo <= f < hi:
            w = _window(f, t0, step)
            lo, hi = t0 + w * step + margin, t0 + (w + 1) * step - margin
        if w >= steps:
            later[n_later] = i
            n_later += 1
            continue
        served[w] += 1
        if done_latency[i] > slo:
            slow[w] += 1
        proc_sum[w] += done_latency[i]
    return n_later


@_jit
def _enter_exit(delta, row, entry, exit_, n_samples):
    """A served request in its instance's row of samples: +1 where it enters, -1 where it
    leaves (the last sample at most); `entry`, `exit_`: seconds from the samples' origin."""
    delta[row + np.int64(math.ceil(entry))] += 1
    delta[row + min(np.int64(math.ceil(exit_)), n_samples)] -= 1


@_jit
def _count_requests(chunk, counts, proc_sum, later, delta, frame, n_done, n_later):
    """This chunk's requests: per window (`counts` rows: arrivals, drops, served, late) and their
    summed latency, each served request's entry and exit in `delta` (its instance's row of
    samples), and the indices of those finishing past the chunk (after `n_later` of them from
    earlier chunks) in `later`; returns how many of those there are now.

    Each window's sums are held in registers while its requests follow each other: the same
    additions in the same order as numpy's bincounts."""
    a, finish, owner = chunk.a, chunk.finish, chunk.owner
    t0, step, slo, completion = frame.t0, frame.step, frame.slo, frame.completion
    origin, n_samples, m = frame.origin, frame.n_samples, frame.m
    arrivals, dropped, served, slow = counts[0], counts[1], counts[2], counts[3]
    steps = len(proc_sum)
    width = n_samples + 1
    margin = 1e-3 * step
    lo, hi, w = np.inf, -np.inf, np.int64(0)  # finish times in [lo, hi) are in window w
    edge, wa = -np.inf, np.int64(-1)  # arrivals are sorted: below `edge`, still in window wa
    arrived = 0
    cur = np.int64(-1)
    n_served, n_slow, latency_sum = 0, 0, 0.0
    for i in range(len(a)):
        t = a[i]
        if t >= edge:
            if wa >= 0:
                arrivals[wa if wa < steps - 1 else steps - 1] += arrived
            arrived = 0
            wa = _window(t, t0, step)
            edge = t0 + (wa + 1) * step - margin
        arrived += 1
        wi = wa if wa < steps - 1 else steps - 1
        f = finish[i]
        if f != f:  # NaN: dropped
            dropped[wi] += 1
            continue
        latency = f - t
        if completion:
            if not lo <= f < hi:
                w = _window(f, t0, step)
                lo, hi = t0 + w * step + margin, t0 + (w + 1) * step - margin
            wi = w
        if wi >= steps:
            later[n_later] = n_done + i
            n_later += 1
        else:
            if wi != cur:
                if cur >= 0:
                    served[cur], slow[cur], proc_sum[cur] = n_served, n_slow, latency_sum
                cur = wi
                n_served, n_slow, latency_sum = served[wi], slow[wi], proc_sum[wi]
            n_served += 1
            if latency > slo:
                n_slow += 1
            latency_sum += latency
        _enter_exit(delta, owner[i] * width if m > 1 else 0, t - origin, f - origin, n_samples)
    if wa >= 0:
        arrivals[wa if wa < steps - 1 else steps - 1] += arrived
    if cur >= 0:
        served[cur], slow[cur], proc_sum[cur] = n_served, n_slow, latency_sum
    return n_later


@_jit
def _busy_samples(delta, held, frame):
    """min(in flight, 1) per instance and sample from the entries and exits in `delta`, with the
    requests held from before the chunk in flight from its first sample; summed over the
    instances marked in `counted` (one row), or one row per instance when it is empty."""
    held_instance, held_finish, counted = held.instance, held.finish, held.counted
    m, n_samples, origin = frame.m, frame.n_samples, frame.origin
    width = n_samples + 1
    for i in range(len(held_instance)):
        row = held_instance[i] * width
        delta[row] += 1
        gone = np.int64(math.ceil(held_finish[i] - origin))
        delta[row + (0 if gone < 0 else n_samples if gone > n_samples else gone)] -= 1
    summed = len(counted) > 0
    busy = np.zeros((1 if summed else m, n_samples), dtype=np.int64)
    for k in range(m):
        if summed and not counted[k]:
            continue
        r = 0 if summed else k
        level = 0
        for j in range(n_samples):
            level += delta[k * width + j]
            busy[r, j] += 1 if level > 1 else level
    return busy


@_jit
def count_chunk(chunk, done, held, frame):
    """`SimService._outcomes`'s counts up to the utilization's busy samples: per window the
    arrivals, drops, served, late and summed latency; the served requests that finish past the
    chunk (completion counting); and the busy samples, min(in flight, 1) per instance and sample:
    summed over the instances marked in `counted` (one row), or all rows when `counted` is empty.

    A window is found by a division only where a time leaves the last one's interval, which sits a
    thousandth of a step inside the window's edges: far beyond the rounding of (t - t0) / step.

    `chunk`: the requests (Served); `done`: earlier chunks' requests still to count (Carried);
    `held`: what the instances held at the chunk's start and which ones are summed (Held);
    `frame`: the windows, the SLO and the samples (Frame)."""
    steps, completion, n_samples, m = frame.steps, frame.completion, frame.n_samples, frame.m
    a, finish, done_finish, done_latency = chunk.a, chunk.finish, done.finish, done.latency
    counts = np.zeros((4, steps), dtype=np.int64)  # arrivals, dropped, served, slow
    proc_sum = np.zeros(steps)
    n, n_done = len(a), len(done_finish)
    later = np.empty(n_done + n, dtype=np.int64)  # indices (earlier chunks' first) counted later
    n_later = 0
    if completion:
        n_later = _count_earlier(done, counts[2], counts[3], proc_sum, later, frame)
    delta = np.zeros(m * (n_samples + 1), dtype=np.int64)
    n_later = _count_requests(chunk, counts, proc_sum, later, delta, frame, n_done, n_later)
    busy = _busy_samples(delta, held, frame)
    left_finish = np.empty(n_later)
    left_latency = np.empty(n_later)
    for j in range(n_later):
        i = later[j]
        if i < n_done:
            left_finish[j], left_latency[j] = done_finish[i], done_latency[i]
        else:
            left_finish[j] = finish[i - n_done]
            left_latency[j] = finish[i - n_done] - a[i - n_done]
    return counts[0], counts[1], counts[2], counts[3], proc_sum, busy, left_finish, left_latency
