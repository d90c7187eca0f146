"""One simulated AI service: instances that start, serve round-robin requests, and drain on removal.

Speed comes from simulating ahead: between two scaling actions the instance set only changes at
known times (startups, drains), so `advance` serves a chunk of many periods in one vectorised pass
and hands out one period's outcome per call. A `scale` call inside a chunk rewinds the service to
that moment (rebuilding queues and the round-robin pointer from the per-request results) and the
next chunk starts small again; chunk length doubles while the policy keeps the count unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from testbed.metrics.window import WindowMetrics
from testbed.profiles import ServiceProfile
from testbed.sim.queueing import serve_exact, serve_fast

MAX_CHUNK_STEPS = 128


@dataclass
class SimInstance:
    """One replica: ready from `ready_at`, gone from `removed_at` (set on scale-down)."""

    ready_at: float
    pending: list[float] = field(default_factory=list)  # finish times of its latest requests
    removed_at: float | None = None

    @property
    def draining(self) -> bool:
        return self.removed_at is not None


@dataclass(frozen=True)
class StepOutcome:
    """What the service did in one window, plus the sums the evaluator aggregates exactly."""

    window: WindowMetrics
    accepted: int
    dropped: int
    proc_time_sum_s: float


@dataclass
class _Chunk:
    """Results of serving [t0, t0 + len(outcomes)·step) with no scaling in between."""

    t0: float
    step: float
    i0: int  # first arrival index
    arrivals: np.ndarray
    finish: np.ndarray  # NaN = dropped
    owner: np.ndarray  # index into SimService.instances at chunk time, -1 = no ready instance
    start_pending: list[list[float]]
    subs: list[tuple[float, int, int, int]]  # (from time, first request, rr at start, targets)
    outcomes: list[StepOutcome]
    used: int = 0


class SimService:
    """Serves a fixed, pre-drawn arrival stream; `advance` moves it through one window.

    Processing times are drawn once per arrival, so two runs with the same seed see the same
    request sizes whatever the policy does (common random numbers across policies).
    """

    def __init__(
        self,
        profile: ServiceProfile,
        arrivals: np.ndarray,
        rng: np.random.Generator,
        *,
        exact: bool = False,
        max_chunk_steps: int = MAX_CHUNK_STEPS,
        util_counts_starting: bool = True,
    ):
        self.profile = profile
        self.util_counts_starting = util_counts_starting
        self.arrivals = arrivals
        lo, hi = profile.proc_time_ms
        self.proc_s = rng.uniform(lo / 1000.0, hi / 1000.0, len(arrivals))
        self.instances = [SimInstance(ready_at=0.0) for _ in range(profile.initial_replicas)]
        self._cursor = 0
        self._rr = 0
        self._exact = exact or profile.capacity != 1
        self._chunk: _Chunk | None = None
        self._next_steps = 1
        self._max_steps = max_chunk_steps

    # -- replica bookkeeping ---------------------------------------------------------------------
    def desired(self) -> int:
        return sum(1 for i in self.instances if not i.draining)

    def ready(self, now: float) -> int:
        return sum(1 for i in self.instances if not i.draining and i.ready_at <= now)

    def units_in_use(self, now: float) -> int:
        alive = sum(1 for i in self.instances if i.removed_at is None or i.removed_at > now)
        return alive * self.profile.units

    def scale(self, replicas: int, now: float) -> None:
        """Add instances (ready after startup) or drain the last ones (gone once their queue is empty)."""
        self._rewind(now)
        active = [i for i in self.instances if not i.draining]
        for _ in range(replicas - len(active)):
            self.instances.append(SimInstance(ready_at=now + self.profile.startup_ms / 1000.0))
        for inst in reversed(active[replicas:] if replicas < len(active) else []):
            last = max(inst.pending, default=now)
            inst.removed_at = now if inst.ready_at > now else max(now, last)
        self._forget(now)

    def _forget(self, now: float) -> None:
        self.instances = [i for i in self.instances if i.removed_at is None or i.removed_at > now]

    # -- periods -----------------------------------------------------------------------------------
    def advance(self, t0: float, t1: float) -> StepOutcome:
        """The outcome of window [t0, t1); windows must follow each other."""
        chunk = self._chunk
        if (
            chunk is None
            or chunk.step != t1 - t0
            or chunk.used >= len(chunk.outcomes)
            or abs(chunk.t0 + chunk.used * chunk.step - t0) > 1e-9
        ):
            if chunk is not None and chunk.used >= len(chunk.outcomes):
                self._next_steps = min(2 * self._next_steps, self._max_steps)
            chunk = self._chunk = self._serve_chunk(t0, t1 - t0, self._next_steps)
        out = chunk.outcomes[chunk.used]
        chunk.used += 1
        return out

    def _rewind(self, now: float) -> None:
        """Make queues, cursor and round-robin pointer those of time `now` inside the current chunk."""
        chunk, self._chunk = self._chunk, None
        self._next_steps = 1
        if chunk is None or now >= chunk.t0 + len(chunk.outcomes) * chunk.step - 1e-9:
            return
        upto = int(np.searchsorted(chunk.arrivals, now, side="left"))
        owner = chunk.owner[:upto]
        finish = chunk.finish[:upto]
        for k, inst in enumerate(self.instances):
            mine = finish[(owner == k) & ~np.isnan(finish)]
            inst.pending = sorted(f for f in [*chunk.start_pending[k], *mine.tolist()] if f > now)
        self._cursor = chunk.i0 + upto
        for start, j0, rr, m in reversed(chunk.subs):
            if start <= now:
                self._rr = (rr + upto - j0) % m if m else rr
                break

    def _serve_chunk(self, t0: float, step: float, steps: int) -> _Chunk:
        self._forget(t0)
        t_end = t0 + steps * step
        i0 = self._cursor
        i1 = i0 + int(np.searchsorted(self.arrivals[i0:], t_end, side="left"))
        self._cursor = i1
        a = self.arrivals[i0:i1]
        s = self.proc_s[i0:i1]
        n = len(a)
        finish = np.full(n, np.nan)
        owner = np.full(n, -1, dtype=np.int64)
        start_pending = [list(inst.pending) for inst in self.instances]
        active = [k for k, inst in enumerate(self.instances) if not inst.draining]
        changes = sorted(
            {self.instances[k].ready_at for k in active if t0 < self.instances[k].ready_at < t_end}
        )
        bounds = [t0, *changes, t_end]
        cuts = np.searchsorted(a, bounds, side="left") if changes else (0, n)
        subs = []
        tokens_used: dict[tuple[int, int], int] = {}  # (instance, rate-limit window) -> admitted
        for b in range(len(bounds) - 1):
            j0, j1 = int(cuts[b]), int(cuts[b + 1])
            targets = [k for k in active if self.instances[k].ready_at <= bounds[b]]
            subs.append((bounds[b], j0, self._rr, len(targets)))
            if j1 == j0 or not targets:
                continue  # no ready instance: these requests are dropped
            m = len(targets)
            slot = (self._rr + np.arange(j1 - j0)) % m
            self._rr = (self._rr + j1 - j0) % m
            pend = [self.instances[k].pending for k in targets]
            who = np.asarray(targets)[slot]
            if self.profile.rate_limit is None:
                adm = slice(None)
            else:
                adm = self._admitted(a[j0:j1], who, tokens_used)
            if self._exact:
                f = serve_exact(
                    a[j0:j1][adm],
                    s[j0:j1][adm],
                    slot[adm],
                    pend,
                    self.profile.capacity,
                    self.profile.queue_limit,
                )
            else:
                f = serve_fast(
                    a[j0:j1][adm], s[j0:j1][adm], slot[adm], pend, self.profile.queue_limit
                )
            for k, p in zip(targets, pend, strict=True):
                self.instances[k].pending = p
            sub_finish = finish[j0:j1]  # a view: dropped requests stay NaN
            sub_finish[adm] = f
            owner[j0:j1] = who
        outcomes = self._outcomes(t0, step, steps, a, finish, owner, start_pending)
        return _Chunk(t0, step, i0, a, finish, owner, start_pending, subs, outcomes)

    def _admitted(
        self, a: np.ndarray, who: np.ndarray, used: dict[tuple[int, int], int]
    ) -> np.ndarray:
        """Which of these arrivals (sorted, instance `who`) the rate limit admits; `used` carries
        each (instance, window)'s admitted count between sub-intervals of a chunk.

        The windows are fixed, [k·w, (k+1)·w), as the published simulator refills every token at
        once. Unlike it, the limit is applied before the queue check, so a request the full queue
        would drop still takes a token; both bind at once only in deep overload."""
        limit, window = self.profile.rate_limit  # type: ignore[misc]
        bucket = np.floor(a / window + 1e-9).astype(np.int64)
        order = np.lexsort((bucket, who))
        key_w, key_b = who[order], bucket[order]
        new_group = np.ones(len(a), dtype=bool)
        new_group[1:] = (key_w[1:] != key_w[:-1]) | (key_b[1:] != key_b[:-1])
        starts = np.flatnonzero(new_group)
        sizes = np.diff(np.append(starts, len(a)))
        rank = np.arange(len(a)) - np.repeat(starts, sizes)
        groups = list(zip(key_w[starts].tolist(), key_b[starts].tolist(), strict=True))
        prior = np.array([used.get(g, 0) for g in groups], dtype=np.int64)
        ok_sorted = rank + np.repeat(prior, sizes) < limit
        for g, p, n in zip(groups, prior.tolist(), sizes.tolist(), strict=True):
            used[g] = min(limit, p + n)
        ok = np.empty(len(a), dtype=bool)
        ok[order] = ok_sorted
        return ok

    def _outcomes(
        self,
        t0: float,
        step: float,
        steps: int,
        a: np.ndarray,
        finish: np.ndarray,
        owner: np.ndarray,
        start_pending: list[list[float]],
    ) -> list[StepOutcome]:
        window = np.minimum(((a - t0) // step).astype(np.int64), steps - 1)
        ok = ~np.isnan(finish)
        latency = finish[ok] - a[ok]
        w_ok = window[ok]
        arrivals = np.bincount(window, minlength=steps)
        accepted = np.bincount(w_ok, minlength=steps)
        slow = np.bincount(w_ok[latency > self.profile.slo_ms / 1000.0], minlength=steps)
        proc_sum = np.bincount(w_ok, weights=latency, minlength=steps)
        util = self._utilization(t0, step, steps, a, finish, owner, start_pending)
        ends = t0 + step * np.arange(1, steps + 1)
        ready = np.zeros(steps, dtype=np.int64)
        for inst in self.instances:
            if not inst.draining:
                ready += ends >= inst.ready_at
        out = []
        name = self.profile.name
        for w in range(steps):
            n, acc, ps = int(arrivals[w]), int(accepted[w]), float(proc_sum[w])
            window_metrics = WindowMetrics(
                service=name,
                seconds=step,
                arrivals=n,
                completed=n,
                violations=n - acc + int(slow[w]),
                utilization=float(util[w]),
                instances=int(ready[w]),
                mean_proc_time_ms=1000.0 * ps / acc if acc else None,
            )
            out.append(StepOutcome(window_metrics, acc, n - acc, ps))
        return out

    def _utilization(
        self,
        t0: float,
        step: float,
        steps: int,
        a: np.ndarray,
        finish: np.ndarray,
        owner: np.ndarray,
        start_pending: list[list[float]],
    ) -> np.ndarray:
        """Per window: mean over per-second samples (mid-second) of the service's instance
        utilization, sum of min(in_flight, capacity) / capacity over instances divided by the
        instance count.

        With `util_counts_starting` (default) the count is every instance holding units and not
        draining, starting ones included (they serve nothing, so they pull the mean down), as in
        the dissertation's own simulator (`sum(count) / (num_inst * capacity)`, num_inst counting
        instances still starting) and its testbed query (sum over pods / running pods). Without
        it, only ready instances count and draining ones count until they are gone."""
        per_window = round(step)
        samples = t0 + 0.5 + np.arange(steps * per_window, dtype=np.float64)
        cap = self.profile.capacity
        total = np.zeros(len(samples))
        present = np.zeros(len(samples))
        ok = ~np.isnan(finish)
        for k, inst in enumerate(self.instances):
            if self.util_counts_starting:
                alive = np.full(len(samples), not inst.draining)
            else:
                alive = samples >= inst.ready_at
                if inst.removed_at is not None:
                    alive &= samples < inst.removed_at
            mine = ok & (owner == k)
            in_flight = np.searchsorted(a[mine], samples, side="right") - np.searchsorted(
                np.sort(finish[mine]), samples, side="right"
            )
            if start_pending[k]:
                in_flight += np.searchsorted(np.sort(start_pending[k]), samples, side="right") * -1 + len(
                    start_pending[k]
                )
            total += np.where(alive, np.minimum(in_flight, cap) / cap, 0.0)
            present += alive
        total = total.reshape(steps, per_window)
        present = present.reshape(steps, per_window)
        seen = present > 0
        frac = np.divide(total, present, out=np.zeros_like(total), where=seen)
        counted = seen.sum(axis=1)
        return np.divide(frac.sum(axis=1), counted, out=np.zeros(steps), where=counted > 0)
