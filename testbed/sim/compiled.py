"""A simulated service's per-request passes as numba-compiled loops (the optional `fast` extra):
the serving ones here, the counting ones in `testbed.sim.compiled_counts` (`count_chunk`, taken
from here too).

Each loop repeats the numpy kernel it stands for with the same IEEE operations in the same order
(the running sums left to right, the closed-form Lindley line, the drop walk, the bincounts'
accumulation order), so a compiled run equals a numpy run to the bit: `SimService` takes this
module when numba imports, and `tests/sim/test_decision_hash.py` pins both paths. Where numpy's
order is hard to repeat (a pairwise sum), the loop stops short and numpy finishes the job.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from testbed.sim.compiled_counts import count_chunk
from testbed.sim.queueing import SEGMENT_GAP
from testbed.sim.windows import EPS

# the two kernels `passes.CompiledPasses` calls: serving here, counting in compiled_counts
__all__ = ["count_chunk", "serve_round_robin"]

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _max(x: float, y: float) -> float:
    return x if x >= y else y  # numpy's maximum on two non-NaN floats, the tie to the first


@_jit
def _push(hist: np.ndarray, used: int, f: float) -> int:
    """Append `f` to a queue's last finish times (oldest first, at most len(hist) of them)."""
    if used == len(hist):
        hist[:-1] = hist[1:]
        hist[-1] = f
        return used
    hist[used] = f
    return used + 1


@_jit
def _serve_one(a, s, lo, hi, hist, used, out):
    """`queueing._serve_one_with_drops` on a[lo:hi]: writes out[lo:hi] (left NaN where dropped)
    and returns how many finish times `hist` (the instance's last `len(hist)`) now holds.

    The closed-form pass runs only up to the first drop (`queueing._first_drop`), which is where
    numpy's pass over the whole rest stops being used: a prefix of a running sum and a running
    max is the same whatever follows it."""
    limit = len(hist)
    pos = lo
    while pos < hi:
        busy = hist[used - 1] if used else -np.inf
        acc = 0.0
        run = 0.0
        stop = hi
        for i in range(pos, hi):  # cumsum, a - (c - s), max with busy, running max, + c
            if i - pos < limit:  # the request `limit` before it is in what the queue held
                if i - pos >= limit - used and hist[used + i - pos - limit] > a[i]:
                    stop = i
                    break
            elif out[i - limit] > a[i]:
                stop = i
                break
            acc += s[i]
            v = _max(a[i] - (acc - s[i]), busy)
            run = v if i == pos else _max(run, v)
            out[i] = run + acc
        for i in range(max(pos, stop - limit), stop):
            used = _push(hist, used, out[i])
        pos = stop
        busy = hist[used - 1] if used else -np.inf
        while pos < hi:
            t = a[pos]
            if busy <= t:
                break  # idle again: back to the closed form
            if used == limit and hist[0] > t:
                pos += 1  # dropped
                continue
            busy = busy + s[pos]
            out[pos] = busy
            used = _push(hist, used, busy)
            pos += 1
    return used


@_jit
def _bucket(t: float, width: float) -> int:
    return np.int64(math.floor(t / width + EPS))  # windows.round_robin_admit's window of t


@_jit
def _bucket_edge(bucket: int, width: float) -> float:
    """A time below which every later time (they are sorted) is still in `bucket`, a thousandth
    of a window below the next window's start: t / width + EPS then stays a thousandth below
    bucket + 1, far beyond the rounding of any bucket under 1e9 (-inf past that: divide always)."""
    return (bucket + 1) * width - 1e-3 * width if bucket < 1_000_000_000 else -np.inf


@_jit
def _admit(a, slots, ok, last_window, last_count, m, rate_limit, rate_window):
    """The rate limit (`windows.round_robin_admit`) over arrivals dealt round-robin to m columns:
    clears `ok` where it refuses, leaves each column's latest window and count in `last_window` and
    `last_count`, and returns how many it admits.

    Column c of the round robin is every m-th arrival from c, all of them to one instance. An
    arrival is admitted while fewer than `rate_limit` of its column came before it in its window,
    i.e. while fewer than rate_limit·m arrivals did (round_robin_admit's runs), less what the
    column's instance took in that window in earlier calls (`prior_window`, `prior_count`). The
    window is found by a division only near its edges: it only grows with t, and arrivals are
    sorted."""
    prior_window, prior_count = slots.prior_window, slots.prior_count
    n = len(a)
    admitted = 0
    col, b, lo = 0, np.int64(0), 0
    edge = -np.inf
    last_rank = np.zeros(m, dtype=np.int64)
    for j in range(n):
        t = a[j]
        if t >= edge:
            nb = _bucket(t, rate_window)
            edge = _bucket_edge(nb, rate_window)
            if nb != b or j == 0:
                b, lo = nb, j
        room = rate_limit * m
        if b == prior_window[col]:
            room = (rate_limit - prior_count[col]) * m
        if j - lo < room:
            admitted += 1
        else:
            ok[j] = False
        last_window[col] = b
        last_rank[col] = j - lo
        col = col + 1 if col + 1 < m else 0
    for c in range(min(n, m)):
        held = last_rank[c] // m + 1 + (prior_count[c] if last_window[c] == prior_window[c] else 0)
        last_count[c] = held if held < rate_limit else rate_limit
    return admitted


@_jit
def _closed_form(chunk, ok, pending_row, p, recent, lane, origin, carry):
    """`queueing.serve_fast`'s closed form, f_i = C_i + max(b, max_j (a_j - C_(j-1))), over one
    slot's admitted arrivals (every m-th from `first`), carrying the running sum `acc` and the
    running max `run` over the offset segments from the slots before it; writes `finish` and the
    slot's last finish times into the ring `recent`. Also checks each request against the one
    `len(recent)` before it (in what the instance held, `pending_row[:p]`, or in the ring): the
    queue fills when that one has not finished by its arrival. Returns (acc, run, started,
    requests, ring position, whether the queue fills).

    `lane`: (first, m), the slot's arrivals; `origin`: (t0, busy, offset), the segment's time
    origin, the instance's busy time and the slot's offset; `carry`: (acc, run, started)."""
    a, s, finish = chunk.a, chunk.s, chunk.finish
    first, m = lane
    t0, busy, offset = origin
    acc, run, started = carry
    limit = len(recent)
    base = acc
    q = 0
    ring = 0
    full = False
    for j in range(first, len(a), m):
        if not ok[j]:
            continue
        aj, sj = a[j], s[j]
        if q < limit:
            if q >= limit - p and pending_row[p + q - limit] > aj:
                full = True
        elif recent[ring] > aj:
            full = True
        acc += sj
        cp = (acc - sj) - base
        x = (aj - t0) - cp
        if q == 0:
            x = _max(x, busy)
        v = x + offset
        run = _max(run, v) if started else v
        started = True
        f = (((run - offset) + cp) + sj) + t0
        finish[j] = f
        recent[ring] = f
        ring = ring + 1 if ring + 1 < limit else 0
        q += 1
    return acc, run, started, q, ring, full


@_jit
def _walk(chunk, ok, pending_row, p, hist, new_row, lane, count):
    """One instance whose queue fills, walked as `queueing._serve_one_with_drops` walks it: its
    `count` admitted arrivals (every m-th from `first`) after what it held (`pending_row[:p]`);
    writes `finish` (NaN where dropped) and its last finish times to `new_row`, and returns how
    many those are. `lane`: (first, m), the instance's arrivals."""
    a, s, finish = chunk.a, chunk.s, chunk.finish
    first, m = lane
    at = np.empty(count, dtype=np.int64)
    i = 0
    for j in range(first, len(a), m):
        if ok[j]:
            at[i] = j
            i += 1
    used = 0
    for i in range(max(0, p - len(hist)), p):
        used = _push(hist, used, pending_row[i])
    out = np.full(count, np.nan)
    used = _serve_one(a[at], s[at], 0, count, hist, used, out)
    for i in range(count):
        finish[at[i]] = out[i]
    new_row[:used] = hist[:used]
    return used


@_jit
def _kept(pending_row, p, recent, ring, q, new_row):
    """(what the instance held + its last finish times)[-limit:], the ring read oldest first;
    returns how many that is."""
    limit = len(recent)
    tail = min(q, limit)
    keep = min(p, limit - tail)
    new_row[:keep] = pending_row[p - keep : p]
    for i in range(tail):
        r = ring - tail + i
        new_row[keep + i] = recent[r if r >= 0 else r + limit]
    return keep + tail


@_jit
def _deal(owner, targets, rr, n):
    """The round robin's deal: arrival j to instance targets[(rr + j) % m], written to `owner`."""
    m = len(targets)
    slot = rr
    for j in range(n):
        owner[j] = targets[slot]
        slot = slot + 1 if slot + 1 < m else 0


@_jit
def serve_round_robin(chunk, slots, rules):
    """One sub-chunk of `SimService._serve_chunk`: arrival j (sorted) goes to slot (rr + j) % m,
    instance targets[slot] (written to `owner`); the rate limit (`windows.round_robin_admit`,
    none when `rate_limit` is 0) admits some, and those are served as `queueing.serve_fast`
    serves them, finish times written to `finish` (NaN-filled: refused and dropped stay NaN).

    `chunk`: the requests and what is written (SubChunk); `slots`: the instances, their carried
    rate-limit windows and their queues (Slots); `rules`: the pointer, rate limit and queue
    (Rules). Returns
    (new pending rows, their lengths, whether a slot's pending changed, each column's latest
    rate-limit window and count, and whether the column saw an arrival)."""
    rr, rate_limit, rate_window, limit = rules.rr, rules.rate_limit, rules.rate_window, rules.limit
    a, owner, targets = chunk.a, chunk.owner, slots.targets
    pending, pending_len = slots.pending, slots.pending_len
    n, m = len(a), len(targets)
    rr = rr % m  # a pointer left by a sub-chunk with more or fewer instances
    last_window = slots.prior_window.copy()
    last_count = slots.prior_count.copy()
    ok = np.ones(n, dtype=np.bool_)
    admitted = n
    if rate_limit > 0:
        admitted = _admit(a, slots, ok, last_window, last_count, m, rate_limit, rate_window)
    seen = np.zeros(m, dtype=np.bool_)
    seen[: min(n, m)] = True
    _deal(owner, targets, rr, n)
    new_pending = np.empty((m, max(limit, pending.shape[1])))
    new_len = pending_len.copy()
    changed = np.zeros(m, dtype=np.bool_)
    if admitted == 0:
        return new_pending, new_len, changed, last_window, last_count, seen
    hist = np.empty(limit)
    if m == 1:  # serve_fast's one-instance walk
        new_len[0] = _walk(chunk, ok, pending[0], pending_len[0], hist, new_pending[0], (0, 1),
                           admitted)
        changed[0] = True
        return new_pending, new_len, changed, last_window, last_count, seen
    first = 0
    while not ok[first]:
        first += 1
    t0 = a[first]  # the first admitted arrival
    # slot after slot, as serve_fast orders them: the running sum and max carry across slots
    recent = np.empty(limit)  # the slot's last `limit` finish times, a ring
    acc, run, started = 0.0, 0.0, False
    for k in range(m):
        p = pending_len[k]
        busy = pending[k, p - 1] - t0 if p else -SEGMENT_GAP / 4
        first = k - rr if k >= rr else k - rr + m
        acc, run, started, q, ring, full = _closed_form(
            chunk, ok, pending[k], p, recent, (first, m), (t0, busy, k * SEGMENT_GAP),
            (acc, run, started))
        if q == 0:
            continue
        changed[k] = True
        if full:  # its queue fills: request by request from the first drop
            new_len[k] = _walk(chunk, ok, pending[k], p, hist, new_pending[k], (first, m), q)
        else:
            new_len[k] = _kept(pending[k], p, recent, ring, q, new_pending[k])
    return new_pending, new_len, changed, last_window, last_count, seen
