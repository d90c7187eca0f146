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

from testbed.metrics.histogram import LatencyHistogram
from testbed.profiles import ServiceProfile
from testbed.sim.chunk import Chunk, ChunkOutcomes, StepOutcome, SubChunk
from testbed.sim.draws import draw_proc_times, draw_startup, startup_rng
from testbed.sim.measure import Period, ScrapeCounter, integral_utilization, scraped_utilization
from testbed.sim.passes import compiled_passes
from testbed.sim.queueing import serve_exact, serve_fast, waiting_at_ends
from testbed.sim.service_options import TestbedEffects, WindowReading
from testbed.sim.window_stats import busy_samples, mean_utilization, ready_by_window, served_percentiles
from testbed.sim.windows import rate_limit_admit as rate_limit_admit  # re-exported for its importers
from testbed.sim.windows import round_robin_admit, window_of

MAX_CHUNK_STEPS = 128
RESTART_CHUNK_STEPS = 32  # after a scaling action: serving ahead costs less than another chunk
SLO_COUNTING = ("completion", "arrival")
BALANCING = ("round-robin", "random")


def _tiled(values, reps: int) -> np.ndarray:
    """`values` repeated `reps` times end to end (np.tile's result, without its Python wrapper)."""
    return np.repeat(np.asarray(values)[None], reps, axis=0).ravel()


@dataclass
class SimInstance:
    """One replica: ready from `ready_at`, gone from `removed_at` (set on scale-down)."""

    ready_at: float
    pending: list[float] = field(default_factory=list)  # finish times of its latest requests
    removed_at: float | None = None
    created_at: float = 0.0  # when it was asked for (a measurement's scrapes start there)
    scrape_phase: float = 0.0  # s after each whole second Prometheus scrapes it (a Measurement)
    stretch: float = 1.0  # its processing times' factor this period (SimCluster's interference)
    gpu: int = 0  # the GPU it runs on (SimCluster's interference)

    @property
    def draining(self) -> bool:
        return self.removed_at is not None


class SimService:
    """Serves a fixed, pre-drawn arrival stream; `advance` moves it through one window.

    Processing times are drawn once per arrival, so two runs with the same seed see the same
    request sizes whatever the policy does (common random numbers across policies): whole
    milliseconds, uniform over the range inclusive, when the range's ends are whole (the
    published simulator's `random.randint`), otherwise uniform. Start-up delays come from a
    stream of their own.

    `reading.slo_counting`: "completion" (default, as the published simulator, simpy_env.py:146, :163-170)
    counts a request in the window it finishes in, a dropped one in the window it arrived in,
    and the rate is (late + dropped) / (finished + dropped); "arrival" counts every request in
    the window it arrived in, over arrivals.
    """

    def __init__(
        self,
        profile: ServiceProfile,
        arrivals: np.ndarray,
        rng: np.random.Generator,
        *,
        exact: bool = False,
        max_chunk_steps: int = MAX_CHUNK_STEPS,
        reading: WindowReading = WindowReading(),
        effects: TestbedEffects = TestbedEffects(),
    ):
        util_counts_starting, slo_counting = reading.util_counts_starting, reading.slo_counting
        util_sample_phase = reading.util_sample_phase
        measurement, balancing, stretched = effects.measurement, effects.balancing, effects.stretched
        if slo_counting not in SLO_COUNTING:
            raise ValueError(f"slo_counting {slo_counting!r}; known: {', '.join(SLO_COUNTING)}")
        if balancing not in BALANCING:
            raise ValueError(f"balancing {balancing!r}; known: {', '.join(BALANCING)}")
        self.profile = profile
        self.units = profile.units  # read on every decision: a field, not two lookups
        if measurement is not None and measurement.counts_starting is not None:
            util_counts_starting = measurement.counts_starting
        self.util_counts_starting = util_counts_starting
        self.slo_counting = slo_counting
        self.util_sample_phase = util_sample_phase
        self.arrivals = arrivals
        self.proc_s = draw_proc_times(profile, len(arrivals), rng)
        self._startup_rng = startup_rng(rng)
        self._done = (np.empty(0), np.empty(0))  # finish, latency: served, not yet counted
        self.instances = [SimInstance(ready_at=0.0) for _ in range(profile.initial_replicas)]
        self._draining = 0  # instances in self.instances with removed_at set
        self._cursor = 0
        self._rr = 0
        self._exact = exact or profile.capacity != 1
        self._passes = compiled_passes(profile, self._exact, arrivals)  # None: the numpy kernels
        self._chunk: Chunk | None = None
        self._next_steps, self._max_steps = 1, max_chunk_steps
        self.measure_queue = True  # windows carry queue_length (SimBackend.measure_queue)
        # every served request's latency, counted as its window is used (None: not kept)
        self.latencies: LatencyHistogram | None = None
        # a testbed's effects (a measurement, random balancing, stretched processing times) are
        # read and applied one period at a time, on the numpy kernels; their draws come from a
        # stream split after the start-up one, so the request sizes and start-ups stay the same
        self.measurement = measurement
        self.balancing = balancing
        self.stretched = stretched
        self._scrapes: ScrapeCounter | None = None
        if measurement is not None or balancing != "round-robin" or stretched:
            self._passes, self._max_steps = None, 1
            self._effects_rng = np.random.default_rng(rng.integers(2**63))
            if measurement is not None and measurement.slo_window == "scrape":
                self._scrapes = ScrapeCounter(profile.slo_ms / 1000.0, measurement.phase_drift)
            self._balance_u = (self._effects_rng.random(len(arrivals)) if balancing == "random"
                               else None)
            for inst in self.instances:
                inst.scrape_phase = self._phase()

    def _phase(self) -> float:
        """A new replica's scrape phase: uniform in [0, 1) s (Prometheus spreads its targets)."""
        if self.measurement is None or not self.measurement.scrapes:
            return 0.0
        return float(self._effects_rng.random())

    # -- replica bookkeeping ---------------------------------------------------------------------
    def desired(self) -> int:
        if not self._draining:
            return len(self.instances)
        return sum(1 for i in self.instances if not i.draining)

    def ready(self, now: float) -> int:
        return sum(1 for i in self.instances if not i.draining and i.ready_at <= now)

    def units_in_use(self, now: float) -> int:
        if not self._draining:
            alive = len(self.instances)
        else:
            alive = sum(1 for i in self.instances if i.removed_at is None or i.removed_at > now)
        return alive * self.units

    def startup_delay(self) -> float:
        """Seconds from scale-up to ready: startup_ms, or a whole number of seconds drawn uniformly
        from [startup, startup_max] (the published simulator: `random.randint(startup_s, 30)`)."""
        return draw_startup(self.profile, self._startup_rng)

    def scale(self, replicas: int, now: float) -> None:
        """Add instances (ready after startup) or drain the last ones (gone once their queue is empty)."""
        self._rewind(now)
        active = [i for i in self.instances if not i.draining]
        for _ in range(replicas - len(active)):
            inst = SimInstance(ready_at=now + self.startup_delay(), created_at=now)
            if self.measurement is not None:
                inst.scrape_phase = self._phase()
            self.instances.append(inst)
        for inst in reversed(active[replicas:] if replicas < len(active) else []):
            last = max(inst.pending, default=now)
            inst.removed_at = now if inst.ready_at > now else max(now, last)
            self._draining += 1
        self._forget(now)

    def _forget(self, now: float) -> None:
        if self._draining:
            self.instances = [i for i in self.instances if i.removed_at is None or i.removed_at > now]
            self._draining = sum(1 for i in self.instances if i.draining)

    # -- periods -----------------------------------------------------------------------------------
    def advance(self, t0: float, t1: float) -> StepOutcome:
        """The outcome of window [t0, t1); windows must follow each other."""
        chunk = self._chunk
        if (
            chunk is None
            or chunk.step != t1 - t0
            or chunk.used >= chunk.outcomes.n
            or abs(chunk.t0 + chunk.used * chunk.step - t0) > 1e-9
        ):
            if chunk is not None and chunk.used >= chunk.outcomes.n:
                self._next_steps = min(2 * self._next_steps, self._max_steps)
            chunk = self._chunk = self._serve_chunk(t0, t1 - t0, self._next_steps)
        out = chunk.outcomes[chunk.used]
        if self.latencies is not None:
            self._count_latencies(chunk, chunk.used)
        chunk.used += 1
        return out

    def _count_latencies(self, chunk: Chunk, k: int) -> None:
        """The latencies of the served requests that arrived in window `k` of `chunk`: final once
        the window is used (a rewind re-serves only what arrives after it)."""
        lo, hi = np.searchsorted(chunk.arrivals, [chunk.t0 + k * chunk.step,
                                                  chunk.t0 + (k + 1) * chunk.step], side="left")
        finish = chunk.finish[lo:hi]
        ok = finish == finish  # not NaN (dropped)
        self.latencies.add(1000.0 * (finish[ok] - chunk.arrivals[lo:hi][ok]))  # type: ignore[union-attr]

    def _rewind(self, now: float) -> None:
        """Make queues, cursor and round-robin pointer those of time `now` inside the current chunk."""
        chunk, self._chunk = self._chunk, None
        self._next_steps = min(RESTART_CHUNK_STEPS, self._max_steps)
        if chunk is None or now >= chunk.t0 + len(chunk.outcomes) * chunk.step - 1e-9:
            return
        upto = int(np.searchsorted(chunk.arrivals, now, side="left"))
        owner = chunk.owner[:upto]
        finish = chunk.finish[:upto]
        # only requests finishing within a window of `now` matter below (the others finished in
        # windows already used); a few, found once (NaN, dropped, compares False)
        near = np.flatnonzero(finish > now - chunk.step - 1e-6)
        f_near = finish[near]
        # served requests not yet counted: those of earlier chunks and of the requests kept here
        # that finish at or after `now` (a window edge), in the order the chunk would count them
        f_all = np.concatenate((chunk.done_in[0], f_near))
        lat_all = np.concatenate((chunk.done_in[1], f_near - chunk.arrivals[near]))
        later = window_of(f_all, now, chunk.step) >= 0
        self._done = (f_all[later], lat_all[later])
        # keep what a utilization sample just before `now` still sees in flight (a request due at
        # `now` may sit a few ulps below it after a cumulative sum), as a chunk without the rewind
        # would: only the utilization depends on it
        held = [[f for f in p if f > now - 1e-6] for p in chunk.start_pending]
        for f, k in zip(f_near.tolist(), owner[near].tolist(), strict=True):  # one pass, not one per instance
            if f > now - 1e-6:
                held[k].append(f)
        for inst, mine in zip(self.instances, held, strict=True):
            inst.pending = sorted(mine)
        self._cursor = chunk.i0 + upto
        for start, j0, rr, m in reversed(chunk.subs):
            if start <= now:
                self._rr = (rr + upto - j0) % m if m else rr
                break

    def _serve_chunk(self, t0: float, step: float, steps: int) -> Chunk:
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
        tokens: dict[int, tuple[int, int]] = {}  # instance -> (latest rate-limit window, admitted)
        self._chunk_i0 = i0
        self._random_used = [np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)]
        for b in range(len(bounds) - 1):
            j0, j1 = int(cuts[b]), int(cuts[b + 1])
            targets = [k for k in active if self.instances[k].ready_at <= bounds[b]]
            subs.append((bounds[b], j0, self._rr, len(targets)))
            if j1 == j0 or not targets:
                continue  # no ready instance: these requests are dropped
            m, rr = len(targets), self._rr
            self._rr = (rr + j1 - j0) % m
            pend = [self.instances[k].pending for k in targets]  # each updated by the serving
            if self._passes is not None:
                self._passes.serve(pend, a[j0:j1], s[j0:j1], targets, rr, tokens, finish[j0:j1],
                                   owner[j0:j1])
            else:
                finish, owner = self._serve_numpy(a, s, SubChunk(j0, j1, targets, rr, tokens, pend),
                                                  finish=finish, owner=owner)
            for k, p in zip(targets, pend, strict=True):
                self.instances[k].pending = p
        done_in = self._done
        outcomes = self._outcomes(t0, step, steps, a, finish, owner, start_pending)
        if self.measure_queue:  # a pass over the chunk's requests: only for a policy that reads it
            outcomes.queue = waiting_at_ends(t0, step, steps, a, finish, owner, start_pending,
                                             self.profile.capacity)
            outcomes.percentiles = served_percentiles(t0, step, steps, a, finish, done_in,
                                                      completion=self.slo_counting == "completion")
        return Chunk(t0, step, i0, a, finish, owner, start_pending, subs, outcomes, done_in)

    def _serve_numpy(self, a, s, sub: SubChunk, *, finish, owner):
        """The arrivals of `sub` through the numpy kernels: writes their finish times and
        instances into the chunk's `finish` and `owner` (or, when they are the whole chunk and all
        admitted, returns the kernels' arrays as those)."""
        j0, j1, targets, rr, tokens, pend = sub.j0, sub.j1, sub.targets, sub.rr, sub.tokens, sub.pend
        m = len(targets)
        if self.balancing == "random" or self.stretched:
            return self._serve_effects(a, s, sub, finish=finish, owner=owner)
        # round-robin: arrival j goes to slot (rr + j) % m, i.e. instance targets[slot]; both
        # sequences are their period repeated, cheaper to tile than to compute
        reps = (rr + j1 - j0 + m - 1) // m
        who = _tiled(targets, reps)[rr : rr + j1 - j0]
        if self.profile.rate_limit is None:
            adm = slice(None)
        else:
            limit, window = self.profile.rate_limit
            adm = round_robin_admit(a[j0:j1], targets, rr, limit, window, tokens)
            if adm.all():
                adm = slice(None)  # a view, not four copies by a mask of all True
        every = isinstance(adm, slice)  # all admitted: the slots are round-robin from rr
        slot = None if every and not self._exact else _tiled(range(m), reps)[rr : rr + j1 - j0]
        if self._exact:
            f = serve_exact(a[j0:j1][adm], s[j0:j1][adm], slot[adm], pend, self.profile.capacity,
                            self.profile.queue_limit)
        else:
            f = serve_fast(a[j0:j1][adm], s[j0:j1][adm], None if every else slot[adm], pend,
                           self.profile.queue_limit, rr if every else None)
        if j1 - j0 == len(a) and every:  # one sub-chunk serving all: its arrays are the chunk's
            return f, who
        sub_finish = finish[j0:j1]  # a view: dropped requests stay NaN
        sub_finish[adm] = f
        owner[j0:j1] = who
        return finish, owner

    def _serve_effects(self, a, s, sub: SubChunk, *, finish, owner):
        """`_serve_numpy` with a testbed's effects: each arrival to a replica drawn at random
        (kube-proxy's choice per connection) instead of round-robin, and each processing time
        times its replica's `stretch`."""
        j0, j1, targets, rr, tokens, pend = sub.j0, sub.j1, sub.targets, sub.rr, sub.tokens, sub.pend
        m = len(targets)
        chosen = np.asarray(targets, dtype=np.int64)
        if self._balance_u is None:
            slot = (rr + np.arange(j1 - j0)) % m
        else:
            u = self._balance_u[self._chunk_i0 + j0:self._chunk_i0 + j1]
            slot = np.minimum((u * m).astype(np.int64), m - 1)
        who = chosen[slot]
        sub_s = s[j0:j1]
        if self.stretched:
            sub_s = sub_s * np.array([inst.stretch for inst in self.instances])[who]
        if self.profile.rate_limit is None:
            adm = np.ones(j1 - j0, dtype=bool)
        elif self._balance_u is None:
            limit, window = self.profile.rate_limit
            adm = round_robin_admit(a[j0:j1], targets, rr, limit, window, tokens)
        else:
            limit, window = self.profile.rate_limit
            adm = rate_limit_admit(a[j0:j1], who, limit, window, self._random_used)
        if self._exact:
            f = serve_exact(a[j0:j1][adm], sub_s[adm], slot[adm], pend, self.profile.capacity,
                            self.profile.queue_limit)
        else:
            f = serve_fast(a[j0:j1][adm], sub_s[adm], slot[adm], pend, self.profile.queue_limit)
        sub_finish = finish[j0:j1]
        sub_finish[adm] = f
        owner[j0:j1] = who
        return finish, owner

    def _outcomes(
        self,
        t0: float,
        step: float,
        steps: int,
        a: np.ndarray,
        finish: np.ndarray,
        owner: np.ndarray,
        start_pending: list[list[float]],
    ) -> ChunkOutcomes:
        if self._passes is not None:
            return self._outcomes_compiled(t0, step, steps, a, finish, owner, start_pending)
        if self.measurement is not None:
            return self._outcomes_measured(t0, step, steps, a, finish, owner, start_pending)
        *columns, util = self._listed_columns(t0, step, steps, a, finish, owner, start_pending)
        return self._listed(t0, step, steps, tuple(columns), util)

    def _listed_columns(self, t0, step, steps, a, finish, owner, start_pending) -> tuple:
        """A chunk's per-window arrivals, served, dropped, slow, summed latency and utilization,
        as the simulator reads them (numpy)."""
        ok = finish == finish  # not NaN (dropped)
        everything = bool(ok.all())
        a_ok, f_ok = (a, finish) if everything else (a[ok], finish[ok])
        slo = self.profile.slo_ms / 1000.0 + 1e-6
        window = np.minimum(window_of(a, t0, step), steps - 1)
        # the arrivals are sorted, so their windows are too: each window's first index by a search
        # (the counts bincount gives, with a search per window instead of a pass over arrivals)
        arrivals = np.diff(np.searchsorted(window, np.arange(steps + 1)))
        dropped = np.zeros(steps, dtype=np.int64) if everything else np.bincount(window[~ok], minlength=steps)
        if self.slo_counting == "completion":
            f_all = np.concatenate((self._done[0], f_ok))
            lat_all = np.concatenate((self._done[1], f_ok - a_ok))
            w_ok, latency = window_of(f_all, t0, step), lat_all
            # the windows past this chunk are counted by a later one: kept, and cut off below
            # (a window's sums take its requests in the same order with or without the others)
            later = w_ok >= steps
            self._done = (f_all[later], lat_all[later])
        else:
            w_ok = window[ok]
            latency = f_ok - a_ok
        served = np.bincount(w_ok, minlength=steps)[:steps]
        slow = np.bincount(w_ok[latency > slo], minlength=steps)[:steps]
        proc_sum = np.bincount(w_ok, weights=latency, minlength=steps)[:steps]
        busy = busy_samples(a_ok, f_ok, owner if everything else owner[ok], start_pending,
                            instances=len(self.instances), origin=t0 + self.util_sample_phase - 1e-6,
                            samples=steps * round(step), capacity=self.profile.capacity)
        return arrivals, served, dropped, slow, proc_sum, self._utilization_of(busy, t0, step, steps)

    def _outcomes_measured(self, t0, step, steps, a, finish, owner, start_pending) -> ChunkOutcomes:
        """One period's outcome as `self.measurement` reads it (see testbed.sim.measure): the
        simulator's own counts, with the utilization and, with SLO window "scrape", the counts
        replaced by the testbed's reading."""
        assert steps == 1, "a measurement reads one period at a time"
        measured = self.measurement
        own = self._listed_columns(t0, step, steps, a, finish, owner, start_pending)
        columns, util = list(own[:5]), own[5]
        period = Period(t0, t0 + step, a, finish, owner, start_pending, self.instances,
                        self.profile.capacity, self.util_counts_starting, self._effects_rng)
        if measured.utilization == "integral":
            util = np.array([integral_utilization(period)])
        elif measured.utilization == "scraped":
            util = np.array([scraped_utilization(period, measured.phase_drift,
                                                 measured.scrape_jitter)])
        if self._scrapes is not None:
            c = self._scrapes.count(period)
            columns = [np.array([x]) for x in (c.requests, c.served, c.refused, c.slow)] + [
                np.array([c.latency_sum_s])]
        return self._listed(t0, step, steps, tuple(columns), util)

    def _listed(self, t0, step, steps, columns, util) -> ChunkOutcomes:
        """A chunk's per-window arrays (`columns`: arrivals, served, dropped, slow, summed latency)
        as the `ChunkOutcomes` a step reads (lists: Python numbers)."""
        return ChunkOutcomes(self.profile.name, step, (*(c.tolist() for c in columns), util.tolist(),
                                                       ready_by_window(self.instances, t0, step, steps)))

    def _outcomes_compiled(self, t0, step, steps, a, finish, owner, start_pending) -> ChunkOutcomes:
        """`_outcomes` through the compiled passes, which count up to the busy samples."""
        completion = self.slo_counting == "completion"
        counted = [not inst.draining for inst in self.instances] if self.util_counts_starting else []
        columns, busy, left = self._passes.count(
            a, finish, owner, t0=t0, step=step, steps=steps, start_pending=start_pending,
            done=self._done, completion=completion,
            sample_origin=t0 + self.util_sample_phase - 1e-6, counted=counted)
        if completion:
            self._done = left
        util = self._utilization_of(busy, t0, step, steps, summed=self.util_counts_starting)
        return self._listed(t0, step, steps, columns, util)

    def _utilization_of(self, busy: np.ndarray, t0: float, step: float, steps: int,
                        summed: bool = False) -> np.ndarray:
        """Per window, the mean utilization of the `busy` samples (testbed.sim.window_stats)."""
        return mean_utilization(busy, self.instances, t0, step, steps, sample_phase=self.util_sample_phase,
                                counts_starting=self.util_counts_starting, summed=summed)
