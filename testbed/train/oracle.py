"""The oracle bound: the best Eq. 3.2 reward any policy could reach on a trace, knowing the future.

Dynamic programming over (instances, scale-down cooldown) per 30 s step, under exactly the action
constraints every policy gets (Algorithm 1's mask via `action_mask`: at least one instance, only
into free units, no scale-down for 6 steps after a scale-up, -2..+2 per step).

Approximation (why it is a bound only approximately): step t's SLO violation rate with n instances
is read from a run that keeps n instances for the whole trace, so each step starts from the queue
that n instances would have built up (a warm queue at that count); the scheduled count is ready at
once (no startup delay) and the queue carried over from a different count history is ignored.
Counts above the smallest one with no violation at all are never better, so only counts up to it
are simulated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from testbed.load.trace import Trace, arrival_times
from testbed.profiles import ServiceProfile
from testbed.profiles.paper import (
    COOLDOWN_STEPS,
    REWARD_ALPHA,
    REWARD_BETA,
    STEP_SECONDS,
    TOTAL_UNITS,
)
from testbed.scaler.actions import ACTIONS, action_mask, next_cooldown
from testbed.sim.cluster import DEFAULT_OPTIONS, SimOptions
from testbed.sim.service import SimService
from testbed.sim.service_options import WindowReading


@dataclass(frozen=True)
class OracleResult:
    """The best schedule: instances per step, and its mean reward and SLO violation rate."""

    reward: float  # mean Eq. 3.2 reward per step
    slo_violation_rate: float  # mean per step
    instances: float  # mean per step
    schedule: tuple[int, ...]  # instances during each step


def static_slo_table(
    profile: ServiceProfile,
    trace: Trace,
    ratio: float,
    max_instances: int,
    *,
    seed: int = 0,
    steps: int | None = None,
    step_seconds: float = STEP_SECONDS,
    options: SimOptions = DEFAULT_OPTIONS,
) -> np.ndarray:
    """slo[t, n-1]: step t's SLO violation rate when n instances (all ready) serve the whole trace.

    Stops at the first count with no violation in any step and repeats that column up to
    `max_instances` (more instances cannot lower the rate below zero)."""
    arrivals = arrival_times(trace, ratio, options.rounding, options.spacing)
    total = int(trace.seconds // step_seconds) if steps is None else steps
    columns: list[np.ndarray] = []
    for n in range(1, max_instances + 1):
        prof = profile.replace(initial_replicas=n)
        svc = SimService(
            prof,
            arrivals,
            np.random.default_rng(seed),
            reading=WindowReading(options.util_counts_starting, options.slo_counting,
                                  options.util_sample_phase),
        )
        col = np.empty(total)
        for t in range(total):
            col[t] = svc.advance(t * step_seconds, (t + 1) * step_seconds).window.slo_violation_rate
        columns.append(col)
        if not col.any():
            break
    while len(columns) < max_instances:
        columns.append(columns[-1])
    return np.stack(columns, axis=1)


def best_schedule(
    slo: np.ndarray,
    *,
    total_units: int = TOTAL_UNITS,
    units_per_instance: int = 1,
    max_instances: int | None = None,
    initial: int = 1,
    alpha: float = REWARD_ALPHA,
    beta: float = REWARD_BETA,
    caps: np.ndarray | None = None,
) -> OracleResult:
    """Maximise the mean of -(alpha·slo[t, n_t - 1] + beta·n_t/total_units) over schedules the
    mask allows, starting with `initial` instances and no cooldown.

    `max_instances` caps the count (default: the table's width); the free units the mask sees are
    (max_instances - n)·units_per_instance. `caps[t]`: the most instances step t may hold (e.g.
    what the other services of a pool left in a run), at least one."""
    steps, width = slo.shape
    cap = width if max_instances is None else min(max_instances, width)
    counts = np.arange(1, cap + 1)
    gain = -(alpha * slo[:, :cap] + beta * counts / total_units)  # gain[t, n-1]
    if caps is not None:
        limit = np.maximum(np.asarray(caps, dtype=np.int64)[:steps], 1)
        if len(limit) < steps:
            raise ValueError(f"{len(limit)} caps for {steps} steps")
        gain[counts[None, :] > limit[:, None]] = -np.inf
    n_cool = COOLDOWN_STEPS + 1
    neg = -np.inf
    # best[n-1, c]: best total of the steps so far, being at n instances with cooldown c
    best = np.full((cap, n_cool), neg)
    best[initial - 1, 0] = gain[0, initial - 1]
    back = np.zeros((steps, cap, n_cool, 2), dtype=np.int16)  # predecessor (n-1, c)
    src_n, src_c, dst_n, dst_c = _moves(cap, n_cool, units_per_instance)
    dst = dst_n * n_cool + dst_c
    starts = np.flatnonzero(np.r_[True, dst[1:] != dst[:-1]])
    sizes = np.diff(np.r_[starts, len(dst)])
    group = np.repeat(np.arange(len(starts)), sizes)
    targets = dst[starts]
    t_n, t_c = targets // n_cool, targets % n_cool
    for t in range(1, steps):
        cand = best[src_n, src_c]
        top = np.maximum.reduceat(cand, starts)
        hits = np.flatnonzero(cand == top[group])
        first = hits[np.unique(group[hits], return_index=True)[1]]  # best move into each target
        best = np.full((cap, n_cool), neg)
        best[t_n, t_c] = top + gain[t, t_n]
        back[t, ..., 0] = -1
        back[t, t_n, t_c, 0] = src_n[first]
        back[t, t_n, t_c, 1] = src_c[first]
    total, path = _best_path(best, back)
    schedule = tuple(k + 1 for k in path)
    rates = slo[np.arange(steps), np.asarray(path)]
    return OracleResult(total / steps, float(rates.mean()), float(np.mean(schedule)), schedule)


def _moves(cap: int, n_cool: int, units_per_instance: int) -> tuple[np.ndarray, ...]:
    """Every move the mask allows, (from n-1, from c, to n-1, to c) as four columns, the same at
    every step, grouped by destination state."""
    moves = []
    for n in range(1, cap + 1):
        for c in range(n_cool):
            mask = action_mask(n, (cap - n) * units_per_instance, units_per_instance, c)
            for i, delta in enumerate(ACTIONS):
                if mask[i]:
                    moves.append((n - 1, c, n - 1 + delta, next_cooldown(c, delta)))
    src_n, src_c, dst_n, dst_c = (np.array(col) for col in zip(*moves, strict=True))
    order = np.lexsort((dst_c, dst_n))
    return src_n[order], src_c[order], dst_n[order], dst_c[order]


def _best_path(best: np.ndarray, back: np.ndarray) -> tuple[float, list[int]]:
    """The best final state's total and the instance counts (n - 1) that led to it, step by step
    (followed back through the predecessors in `back`)."""
    n_last, c_last = np.unravel_index(int(np.argmax(best)), best.shape)
    total = float(best[n_last, c_last])
    path = [int(n_last)]
    n, c = int(n_last), int(c_last)
    for t in range(len(back) - 1, 0, -1):
        n, c = int(back[t, n, c, 0]), int(back[t, n, c, 1])
        path.append(n)
    path.reverse()
    return total, path


@dataclass(frozen=True)
class InstanceCaps:
    """The most instances an oracle's schedule may hold: in all (None: every unit of the pool;
    with services sharing the pool, the units the others cannot take from it, a relaxation, so
    still a bound) and per step (`best_schedule`'s caps; None: no step's own)."""

    most: int | None = None
    per_step: np.ndarray | None = None


NO_CAPS = InstanceCaps()


def oracle(
    profile: ServiceProfile,
    trace: Trace,
    ratio: float,
    *,
    total_units: int = TOTAL_UNITS,
    seed: int = 0,
    steps: int | None = None,
    options: SimOptions = DEFAULT_OPTIONS,
    limit: InstanceCaps = NO_CAPS,
) -> OracleResult:
    """The oracle bound for one service on `trace` (see the module docstring for what it ignores),
    its instances held within `limit`."""
    per = profile.units
    cap = total_units // per if limit.most is None else limit.most
    slo = static_slo_table(profile, trace, ratio, cap, seed=seed, steps=steps, options=options)
    return best_schedule(
        slo,
        total_units=total_units,
        units_per_instance=per,
        max_instances=cap,
        initial=profile.initial_replicas,
        caps=limit.per_step,
    )


def shared_pool_oracles(
    profiles: dict[str, ServiceProfile],
    traces: dict[str, Trace],
    ratios: dict[str, float],
    *,
    total_units: int = TOTAL_UNITS,
    seed: int = 0,
    options: SimOptions = DEFAULT_OPTIONS,
) -> dict[str, OracleResult]:
    """One oracle per service of a shared pool: each may use every unit the others' first
    instances do not hold (a relaxation of the shared constraint, so each stays a bound)."""
    out = {}
    for name, prof in profiles.items():
        others = sum(p.initial_replicas * p.units for n, p in profiles.items() if n != name)
        cap = max((total_units - others) // prof.units, prof.initial_replicas)
        out[name] = oracle(
            prof,
            traces[name],
            ratios[name],
            total_units=total_units,
            limit=InstanceCaps(most=cap),
            seed=seed,
            options=options,
        )
    return out


@dataclass(frozen=True)
class ShareBound:
    """An upper bound on the mean reward -(alpha·SLO rate + beta·share units / total units) of any
    policy that sets counts, shares and batches (the GPU model), per service."""

    reward: float
    share_units: float  # mean share, in units, of the bound's schedule
    best_rate_per_pct: float  # requests one % of a GPU serves per second at best, for 1 s draws


@dataclass(frozen=True)
class BoundTerms:
    """What a share bound is counted in: Eq. 3.2's weights, the share unit (% of a GPU), the
    step and how a trace's counts become arrival times; the paper's unless given."""

    alpha: float = REWARD_ALPHA
    beta: float = REWARD_BETA
    unit_pct: float = 25.0
    step_seconds: float = STEP_SECONDS
    rounding: str = "floor"


PAPER_TERMS = BoundTerms()


def share_bound(
    profile: ServiceProfile,
    trace: Trace,
    ratio: float,
    *,
    total_units: int,
    steps: int | None = None,
    proc_s: np.ndarray | None = None,
    terms: BoundTerms = PAPER_TERMS,
) -> ShareBound:
    """A fluid relaxation, so every relaxation makes it larger: the share is divisible and costs
    only while the step needs it (no startup, no cooldown, no whole instances); no interference,
    no queueing, every batch at the batch size and share that use the least GPU (% x s) per unit
    of processing time while a lone batch of the fastest draws still meets the SLO.

    A batch of k requests at share s takes mean(draws) x factor(k, s) x (1 + I) (`GpuCurve.factor`:
    batch(k) x share(s), held at the curve's floor), so it uses at least e·sum(draws) of % x s,
    e = min over (k, s) of s·factor(k, s)/k. With share S held
    over the step, the requests of step t can use at most S·(step + SLO) % x s (nothing is done
    before they arrive or after the SLO), so at most the m smallest draws with e·(their sum) within
    it are on time. `proc_s` (one draw per arrival, the simulator's common random numbers) makes
    this per request; without it every request takes the fastest draw (looser). The best S per
    step is the smallest share serving its m smallest requests for some m (or the floor, serving
    none); the bound is the mean of the per-step optima."""
    unit_pct, step_seconds = terms.unit_pct, terms.step_seconds
    slo_s = profile.slo_ms / 1000.0
    fastest = profile.proc_time_ms[0] / 1000.0
    shares = np.arange(0.5, 100.0001, 0.5)
    best, smallest = _best_rate(profile, shares, unit_pct)
    arrivals = arrival_times(trace, ratio, terms.rounding)
    total = int(trace.seconds // step_seconds) if steps is None else steps
    draws = np.full(len(arrivals), fastest) if proc_s is None else np.asarray(proc_s, dtype=float)
    if len(draws) != len(arrivals):
        raise ValueError(f"{len(draws)} draws for {len(arrivals)} arrivals")
    step_of = (arrivals // step_seconds).astype(np.int64)
    keep = step_of < total
    step_of, draws = step_of[keep], draws[keep]
    order = np.lexsort((draws, step_of))  # by step, the smallest draws first
    step_of, draws = step_of[order], draws[order]
    counts = np.bincount(step_of, minlength=total).astype(float)
    cost = terms.beta / (unit_pct * total_units)  # reward per % of share
    floor_pct = shares[0]
    # serving none: the smallest share any policy can hold, every request of the step late
    rewards = -(terms.alpha * (counts > 0) + cost * floor_pct)
    share = np.full(total, floor_pct)
    if len(draws) and best > 0:
        _serve_smallest_first(step_of, draws, counts, (best * (step_seconds + slo_s), smallest),
                              (terms.alpha, cost), (rewards, share))
    return ShareBound(float(rewards.mean()), float(share.mean() / unit_pct), best)


def _best_rate(profile: ServiceProfile, shares: np.ndarray, unit_pct: float) -> tuple[float, float]:
    """Requests per (% x s) of draw time at the best batch size and share whose lone batch of
    the fastest draws meets the SLO, and the smallest share that does (100 where none)."""
    g = profile.gpu
    slo_s = profile.slo_ms / 1000.0
    fastest = profile.proc_time_ms[0] / 1000.0
    best, smallest = 0.0, 100.0
    for b in range(1, (g.max_batch if g else 1) + 1):
        for s in shares if g else [unit_pct]:
            factor = g.factor(b, s) if g else 1.0
            if fastest * factor > slo_s:
                continue
            smallest = min(smallest, s)
            best = max(best, b / factor / s)
    return best, smallest


def _serve_smallest_first(
    step_of: np.ndarray, draws: np.ndarray, counts: np.ndarray, capacity: tuple[float, float],
    weights: tuple[float, float], into: tuple[np.ndarray, np.ndarray],
) -> None:
    """Per step, the best m of serving its m smallest draws on time, where that beats serving
    none: its reward and share written over `into` (rewards, share). `capacity`: the work one %
    of share does in a step's window, and the smallest useful share; `weights`: alpha, and the
    reward's cost per % of share."""
    per_pct, smallest = capacity
    alpha, cost = weights
    rewards, share = into
    starts = np.flatnonzero(np.r_[True, step_of[1:] != step_of[:-1]])
    sizes = np.diff(np.r_[starts, len(step_of)])
    rank = np.arange(len(step_of)) - np.repeat(starts, sizes) + 1  # requests on time, m
    work = np.cumsum(draws)
    work -= np.repeat(work[starts] - draws[starts], sizes)  # sum of the m smallest draws
    need = np.maximum(work / per_pct, smallest)  # share serving those m
    a_t = counts[step_of]
    r = -(alpha * (a_t - rank) / a_t + cost * need)
    top = np.maximum.reduceat(r, starts)
    steps_with = step_of[starts]
    better = top > rewards[steps_with]
    at = np.flatnonzero(r == np.repeat(top, sizes))
    first = at[np.unique(step_of[at], return_index=True)[1]]
    rewards[steps_with[better]] = top[better]
    share[steps_with[better]] = need[first][better]
