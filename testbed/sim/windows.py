"""Fixed time windows over whole-millisecond times: which window a time falls in, and which arrivals
a per-instance rate limit over such windows admits (the published simulator's token refill).
"""

from __future__ import annotations

import numpy as np

from testbed.sim.queueing import group_order

EPS = 1e-9  # times are whole milliseconds held as float seconds: edges compare with this slack


def window_of(t: np.ndarray, t0: float, step: float) -> np.ndarray:
    """Index of the window [t0 + k·step, t0 + (k+1)·step) holding each time."""
    x = t - t0  # then / step + EPS, floored: in place, one array instead of three
    x /= step
    x += EPS
    return np.floor(x, out=x).astype(np.int64)


def rate_limit_admit(
    a: np.ndarray,
    who: np.ndarray,
    limit: float,
    window: float,
    used: list[np.ndarray],
    cost: np.ndarray | None = None,
) -> np.ndarray:
    """Which of these arrivals (sorted; `who`: the instance each goes to) a per-instance rate limit
    admits: at most `limit` per instance in each fixed window [k·w, (k+1)·w), in arrival order.
    `used` (sorted group keys, admitted so far) carries each (instance, window)'s count from call
    to call. With `cost` (one per arrival) an arrival takes that many tokens instead of one, and
    is admitted while the window's tokens asked for so far, its own included, stay within `limit`.

    The windows are fixed, as the published simulator refills every token at once
    (simpy_env.py:63-67). Unlike it (:127-134), the limit is applied before the queue check, so a
    request the full queue would drop still takes a token; both bind at once only in deep
    overload (a rate-limited instance's queue stays short)."""
    n = len(a)
    bucket = np.floor(a / window + EPS).astype(np.int64)
    key = who.astype(np.int64) * (1 << 40) + bucket
    # by group, arrival order within one: arrivals are sorted, so within an instance the windows
    # already ascend and a stable sort on the instance alone orders the keys
    single = n == 0 or who.min() == who.max()
    order = None if single else group_order(who, int(who.max()) + 1)
    k_sorted = key if order is None else key[order]
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = k_sorted[1:] != k_sorted[:-1]
    starts = np.flatnonzero(new_group)
    sizes = np.diff(np.append(starts, n))
    rank = np.arange(n) - np.repeat(starts, sizes)
    groups = k_sorted[starts]
    old_keys, old_counts = used
    prior = np.zeros(len(groups), dtype=np.int64 if cost is None else np.float64)
    if len(old_keys):
        at = np.minimum(np.searchsorted(old_keys, groups), len(old_keys) - 1)
        hit = old_keys[at] == groups
        prior[hit] = old_counts[at[hit]]
        keep = np.ones(len(old_keys), dtype=bool)  # groups seen again are re-added below
        keep[at[hit]] = False
        old_keys, old_counts = old_keys[keep], old_counts[keep]
    if cost is None:
        ok_sorted = rank + np.repeat(prior, sizes) < limit
        spent = np.minimum(limit, prior + sizes)
    else:
        c_sorted = cost if order is None else cost[order]
        within = np.cumsum(c_sorted) - np.repeat(np.cumsum(c_sorted)[starts] - c_sorted[starts], sizes)
        ok_sorted = np.repeat(prior, sizes) + within <= limit + 1e-9
        spent = np.minimum(limit, prior + np.add.reduceat(c_sorted, starts))
    keys = np.concatenate((old_keys, groups))
    counts = np.concatenate((old_counts.astype(spent.dtype), spent))
    by_key = np.argsort(keys)
    used[0], used[1] = keys[by_key], counts[by_key]
    if order is None:
        return ok_sorted
    ok = np.empty(n, dtype=bool)
    ok[order] = ok_sorted
    return ok


def round_robin_admit(
    a: np.ndarray,
    targets: list[int],
    rr: int,
    limit: int,
    window: float,
    last: dict[int, tuple[int, int]],
) -> np.ndarray:
    """`rate_limit_admit` (no cost) for arrivals dealt round-robin, arrival j (sorted) to instance
    targets[(rr + j) % m], without its sort. The arrivals are sorted, so each rate-limit window's
    arrivals are one run of indices [lo, hi), and an instance's earlier arrivals in that window
    are every m-th index before j: arrival j ranks (j - lo) // m within its (instance, window),
    and the limit refuses exactly [lo + limit·m, hi), one run per window that overflows.
    `last` (instance -> (window, admitted in it)) carries counts from call to call; it keeps only
    each instance's latest window, the only one a later (sorted) arrival can fall in."""
    n, m = len(a), len(targets)
    if n == 0:
        return np.zeros(0, dtype=bool)
    bucket = np.floor(a / window + EPS).astype(np.int64)
    first = int(bucket[0])
    lo = np.zeros(int(bucket[-1]) - first + 2, dtype=np.int64)  # lo[w]: window first + w's first
    np.cumsum(np.bincount(bucket - first), out=lo[1:])
    cut = lo[:-1] + limit * m
    over = np.flatnonzero(cut < lo[1:])
    if len(over):  # admitted and refused runs alternate: [0, cut), [cut, hi), [hi, next cut), ..
        edges = np.empty(2 * len(over) + 2, dtype=np.int64)
        edges[0], edges[-1] = 0, n
        edges[1:-1:2], edges[2:-1:2] = cut[over], lo[1:][over]
        admitted = np.zeros(len(edges) - 1, dtype=bool)
        admitted[::2] = True
        ok = np.repeat(admitted, np.diff(edges))
    else:
        ok = np.ones(n, dtype=bool)
    owner = [targets[(rr + c) % m] for c in range(m)]
    heads = bucket[:m].tolist()  # the window of each column's first arrival (column c: c, c+m, ..)
    prior = [0] * m  # admitted in earlier calls, in that window
    for c, b in enumerate(heads):
        seen = last.get(owner[c])
        if seen is not None and seen[0] == b and seen[1]:
            prior[c] = seen[1]
            start = int(lo[b - first]) + (limit - seen[1]) * m  # refused from here on ..
            start = max(c, start + (c - start) % m)  # .. at the column's arrivals
            ok[start : int(lo[b - first + 1]) : m] = False
    for c, head in enumerate(heads):
        j = c + (n - 1 - c) // m * m  # the column's last arrival
        b = int(bucket[j])
        run = (j - int(lo[b - first])) // m + 1 + (prior[c] if b == head else 0)
        last[owner[c]] = (b, min(limit, run))
    return ok
