"""A simulated service's per-request passes as numba-compiled loops (the optional `fast` extra).

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

from testbed.sim.queueing import SEGMENT_GAP
from testbed.sim.windows import EPS

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
