"""Serve one batch of arrivals on round-robin instances: FIFO queues with a per-instance limit, and
how many wait at the end of each window (`waiting_at_ends`).

Two kernels with identical results: `serve_exact` walks requests one by one (any capacity) and is
the reference; `serve_fast` handles capacity 1 (every profile in the dissertation) with numpy,
using the Lindley recursion in closed form, f_i = C_i + max(b, max_{j<=i}(a_j - C_{j-1})),
segmented per instance, and falls back to the exact walk only for instances that drop requests.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

SEGMENT_GAP = 1.0e7  # offset between instances in the segmented cumulative max (s)
_INT16_MAX = 32767


def serve_exact(
    a: np.ndarray,
    s: np.ndarray,
    slot: np.ndarray,
    pending: list[list[float]],
    capacity: int,
    queue_limit: int,
) -> np.ndarray:
    """Finish time of every request (NaN when dropped); `pending` (per-slot finish times of
    requests still in the system, sorted) is updated in place.

    A request is dropped when its instance already holds capacity + queue_limit requests.
    """
    finish = np.full(len(a), np.nan)
    limit = capacity + queue_limit
    # per slot: heap of busy servers' free times and FIFO of queued finish times
    for slot_id in np.unique(slot):
        idx = np.flatnonzero(slot == slot_id)
        in_system = pending[slot_id]
        servers = sorted(in_system)[-capacity:]  # each server's last assigned request
        heapq.heapify(servers)
        system = sorted(in_system)
        for i in idx.tolist():
            t = float(a[i])
            while system and system[0] <= t:
                system.pop(0)
            if len(system) >= limit:
                continue
            while len(servers) >= capacity and servers[0] <= t:
                heapq.heappop(servers)
            begin = t if len(servers) < capacity else heapq.heappop(servers)
            begin = max(begin, t)
            f = begin + float(s[i])
            heapq.heappush(servers, f)
            finish[i] = f
            # FIFO: a later request never finishes before an earlier one on a capacity-1 instance;
            # with more servers keep the list sorted.
            pos = len(system)
            while pos > 0 and system[pos - 1] > f:
                pos -= 1
            system.insert(pos, f)
        pending[slot_id] = system
    return finish


def group_order(group: np.ndarray, groups: int) -> np.ndarray:
    """Indices that sort `group` (small non-negative ints) stably: numpy radix-sorts 16-bit keys,
    far cheaper than its general stable sort on the int64 ones."""
    if groups <= _INT16_MAX:
        group = group.astype(np.int16)
    return np.argsort(group, kind="stable")


def serve_fast(
    a: np.ndarray,
    s: np.ndarray,
    slot: np.ndarray | None,
    pending: list[list[float]],
    queue_limit: int,
    rr: int | None = None,
) -> np.ndarray:
    """`serve_exact` for capacity 1, vectorised across instances (see module docstring); `a` sorted.
    `rr`: arrival j went to slot (rr + j) % m, all of them (round-robin, none refused), so the
    order by slot is known without a sort, and `slot` is not read (None will do)."""
    n = len(a)
    m = len(pending)
    if n == 0:
        return np.empty(0)
    if m == 1:  # one instance: no grouping, the single-instance walk is the whole job
        finish, pending[0] = _serve_one_with_drops(a, s, pending[0], 1 + queue_limit)
        return finish
    order, counts, seg = _by_slot(slot, n, m, rr)
    starts = np.cumsum(counts) - counts
    a_o = a[order]
    s_o = s[order]
    t0 = float(a[0])  # arrivals are sorted
    # in place where an operand is a temporary: the same operations in the same order, fewer
    # arrays of a chunk's size allocated and freed
    c_incl = np.cumsum(s_o)
    base = np.where(starts > 0, c_incl[starts - 1], 0.0)  # the sum before each instance's first
    cp = c_incl - s_o
    cp -= np.repeat(base, counts)  # within-instance service sum before request i
    x = a_o - t0
    x -= cp
    busy_until = np.array([p[-1] - t0 if p else -SEGMENT_GAP / 4 for p in pending])
    nonempty = counts > 0
    first = starts[nonempty]
    x[first] = np.maximum(x[first], busy_until[nonempty])
    offset = seg * SEGMENT_GAP
    x += offset
    f_o = np.maximum.accumulate(x, out=x)  # then - offset + cp + s_o + t0, left to right
    f_o -= offset
    f_o += cp
    f_o += s_o
    f_o += t0

    limit = 1 + queue_limit
    spans = [(k, at, at + c)  # each instance's run in the sorted order
             for k, (at, c) in enumerate(zip(starts.tolist(), counts.tolist(), strict=True)) if c]
    full = _filling(f_o, a_o, seg, spans, pending, limit)
    finish = np.empty(n)
    for k, at, end in spans:
        if k in full:
            f_o[at:end], pending[k] = _serve_one_with_drops(a_o[at:end], s_o[at:end], pending[k], limit)
        else:
            pending[k] = (pending[k] + f_o[max(at, end - limit) : end].tolist())[-limit:]
    finish[order] = f_o
    return finish


def _by_slot(
    slot: np.ndarray | None, n: int, m: int, rr: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The arrivals in slot order: the indices that order them, each slot's count, and the slot of
    each in that order (`serve_fast`'s `rr`: the order known without a sort)."""
    if rr is None:
        order = group_order(slot, m)
        return order, np.bincount(slot, minlength=m), slot[order]
    # slot k holds arrivals (k - rr) % m, then every m-th
    runs = [range((k - rr) % m, n, m) for k in range(m)]
    order = np.concatenate([np.arange(r.start, n, m) for r in runs])
    counts = np.array([len(r) for r in runs])
    return order, counts, np.repeat(np.arange(m), counts)


def _filling(
    f_o: np.ndarray, a_o: np.ndarray, seg: np.ndarray, spans: list[tuple[int, int, int]],
    pending: list[list[float]], limit: int,
) -> set[int]:
    """The instances whose queue fills in this batch, from the finish times without drops.

    Request i of an instance is dropped when the (limit)-th previous request in that instance's
    system (pending first, then this batch) has not finished by a_i. Within the batch that request
    is i - limit when it is the same instance's (seg equal); queues seldom fill, so the shifted
    comparison runs over all requests and the instance check over its few hits."""
    n = len(f_o)
    late = np.flatnonzero(f_o[:-limit] > a_o[limit:]) + limit if n > limit else np.empty(0, np.int64)
    if len(late):
        late = late[seg[late] == seg[late - limit]]
    full = set(seg[late].tolist()) if len(late) else set()
    for k, at, end in spans:
        p = pending[k]
        lo, hi = max(0, limit - len(p)), min(end - at, limit)
        if lo < hi and k not in full:  # the first requests look back into what the instance held
            held, head = p[len(p) + lo - limit : len(p) + hi - limit], a_o[at + lo : at + hi].tolist()
            if any(f > t for f, t in zip(held, head, strict=True)):
                full.add(k)
    return full


def _serve_one_with_drops(
    a: np.ndarray, s: np.ndarray, pending: list[float], limit: int
) -> tuple[np.ndarray, list[float]]:
    """One capacity-1 instance that drops requests: vectorised Lindley while no request is dropped,
    a request-by-request walk from the first drop until the instance is idle again, and repeat."""
    n = len(a)
    out = None
    hist: deque[float] = deque(pending[-limit:], maxlen=limit)
    pos = 0
    while pos < n:
        busy = hist[-1] if hist else -np.inf
        c_incl = np.cumsum(s[pos:])
        f = a[pos:] - (c_incl - s[pos:])  # in place below: max(a - cp, busy), running max, + c_incl
        np.maximum(f, busy, out=f)
        np.maximum.accumulate(f, out=f)
        f += c_incl
        stop = _first_drop(a[pos:], f, hist, limit)
        if pos == 0 and stop == n:
            out = f  # nothing dropped: the vectorised pass is the whole answer
        else:
            if out is None:
                out = np.full(n, np.nan)
            out[pos : pos + stop] = f[:stop]
        hist.extend(f[max(0, stop - limit) : stop].tolist())
        pos += stop
        busy = hist[-1] if hist else -np.inf
        while pos < n:
            t = float(a[pos])
            if busy <= t:
                break  # idle again: back to the vectorised pass
            if len(hist) == limit and hist[0] > t:
                pos += 1  # dropped
                continue
            busy = busy + float(s[pos])
            out[pos] = busy
            hist.append(busy)
            pos += 1
    return (np.empty(0) if out is None else out), list(hist)


def _first_drop(a: np.ndarray, f: np.ndarray, hist: deque[float], limit: int) -> int:
    """Index of the first request the queue would drop (len(a) if none): request i finds the
    system full when the request `limit` before it, in `hist` and then in this pass, finishes
    after a_i. `f`: the pass's finish times assuming nothing is dropped."""
    n, h = len(a), len(hist)
    head = a[: min(limit, n)].tolist()
    for i in range(max(0, limit - h), len(head)):
        if hist[h + i - limit] > head[i]:
            return i
    if n > limit:
        late = np.flatnonzero(f[:-limit] > a[limit:])
        if len(late):
            return int(late[0]) + limit
    return n


def waiting_at_ends(t0: float, step: float, steps: int, a: np.ndarray, finish: np.ndarray,
                    owner: np.ndarray, start_pending: list[list[float]], cap: int) -> list[int]:
    """Per window: the requests waiting at its end, sum over instances of max(0, in flight -
    capacity), in flight meaning arrived by the end and not finished by it (a request runs
    once one of its instance's `capacity` slots is free, in order)."""
    ends = t0 + step * np.arange(1, steps + 1)
    m, width = len(start_pending), steps + 1
    ok = finish == finish  # not NaN (dropped)
    mine = owner[ok]
    # in flight at ends[w] for w in [first end after arrival, first end at or after finish): a
    # request arriving on an end is the next window's, as a chunk ending there has it; times
    # are whole milliseconds, so 1 us either side keeps a sum's ulps off the edge
    enter = np.searchsorted(ends - 1e-6, a[ok], side="right") + mine * width
    leave = np.searchsorted(ends + 1e-6, finish[ok], side="left") + mine * width
    delta = np.bincount(enter, minlength=m * width) - np.bincount(leave, minlength=m * width)
    for k, held in enumerate(start_pending):  # in flight from the chunk's start until they finish
        if held:
            delta[k * width] += len(held)
            np.subtract.at(delta, k * width + np.searchsorted(ends + 1e-6, held, side="left"), 1)
    in_flight = np.cumsum(delta.reshape(m, width)[:, :steps], axis=1) if m else np.zeros((1, steps))
    return np.maximum(in_flight - cap, 0).sum(axis=0).astype(np.int64).tolist()
