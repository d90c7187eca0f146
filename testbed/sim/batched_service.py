"""One service on the simulator's GPUs: a central queue that closes batches and instances that serve them.

Each instance of a service holds one GPU's share (%), and all instances of a service share its
batch size. A service keeps one central queue (FA2 Section V, InSS's task buffer) that closes a
batch when it holds `batch` requests or when its first request has waited `batch_wait` (a fraction
of the SLO, like a serving system's max queue delay); closed batches go round-robin to the ready
instances, each a FIFO of batches dropping a batch when ceil(queue_limit / batch) batches already
wait. An instance serves `capacity` batches at once (the profile's requests processed at the same
time: several streams of one model on its share), each in its own time, as `SimService`'s
`capacity` slots serve requests. A batch of k requests takes

    mean draw of its requests (Table 4.4's range) * batch(k) * share(s) * (1 + interference)

from the profile's `gpu` curve, the interference term (InSS Section 4.1) summing the other ready
instances on the same GPU (`GpuSimCluster.stretches` hands it in). The published simulator's
choices are the DRAFAS simulator's pieces, reused: the per-instance rate limit
(`rate_limit_admit`, a batch taking tokens by its nominal time), start-up delays in whole seconds
up to `startup_max_ms` (`draw_startup`, the same stream), and a request's SLO counted in the period
it finishes in. With batch 1 the batches are the requests and the FIFO is
`testbed.sim.queueing.serve_fast`, the DRAFAS kernel, so the DRAFAS configuration (25 % slices,
batch 1, `interference=False`) gives `SimService`'s periods exactly (tests/sim/test_gpu.py,
bench/gpu_drafas.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from testbed.errors import StateError
from testbed.metrics.window import WindowMetrics, latency_percentiles
from testbed.profiles import ServiceProfile
from testbed.profiles.paper import UNIT_PCT
from testbed.sim.draws import draw_proc_times, draw_startup, startup_rng
from testbed.sim.queueing import serve_exact, serve_fast
from testbed.sim.service import SLO_COUNTING
from testbed.sim.windows import rate_limit_admit, window_of

BATCH_WAIT_OF_SLO = 0.25  # a batch closes after its first request waited this fraction of the SLO
# times (whole milliseconds held as float seconds) and summed shares (%) compare with this slack
EPS = 1e-9


@dataclass
class GpuInstance:
    """One replica: a share of one GPU; serves from `ready_at`, takes no new batch from
    `accept_until`, and holds its share until its last batch finishes after that."""

    gpu: int
    share: float
    created_at: float
    ready_at: float
    accept_until: float = math.inf
    pending: list[float] = field(default_factory=list)  # finish times of its batches in the system

    @property
    def draining(self) -> bool:
        return self.accept_until < math.inf

    def gone(self, now: float) -> bool:
        return self.accept_until <= now + EPS and (not self.pending or self.pending[-1] <= now + EPS)


@dataclass(frozen=True)
class GpuStepOutcome:
    """One period of one service on the batched path."""

    window: WindowMetrics
    counted: int  # requests whose batch closed in the period (the SLO rate's denominator)
    served: int  # of those, served (not dropped)
    on_time: int  # of those, within the SLO
    dropped: int
    proc_time_sum_s: float  # summed latency of served requests
    batches: int



@dataclass(frozen=True)
class _Batches:
    """One period's closed batches: where each starts among the requests, its size, when it was
    ready, when it finished (NaN: dropped) and on which instance (-1: none), and what every
    instance held as the period began."""

    starts: np.ndarray
    sizes: np.ndarray
    ready_t: np.ndarray
    finish: np.ndarray
    owner: np.ndarray
    start_pending: list[list[float]]


class BatchedService:
    """A service's central queue and its instances on GPUs (see the module docstring).

    `routed=N`: a later stage of a chain, whose arrivals come from `feed` (at most N of them, the
    first stage's requests) instead of `arrivals`."""

    def __init__(
        self,
        profile: ServiceProfile,
        arrivals: np.ndarray,
        rng: np.random.Generator,
        *,
        batch_wait_s: float | None = None,
        slo_counting: str = "completion",
        routed: int | None = None,
    ):
        if slo_counting not in SLO_COUNTING:
            raise ValueError(f"slo_counting {slo_counting!r}; known: {', '.join(SLO_COUNTING)}")
        self.profile = profile
        self.slo_counting = slo_counting
        self.measure_queue = True  # windows carry queue_length (SimBackend.measure_queue)
        if routed is None:
            self.arrivals = arrivals
            self._n = len(arrivals)  # arrivals known so far
            self.origin: np.ndarray | None = None  # request i is the chain's request i
        else:
            self.arrivals = np.empty(routed)
            self._n = 0
            self.origin = np.empty(routed, dtype=np.int64)  # the chain's request of each arrival
        self.track = routed is not None  # keep each closed request's finish (`closed`)
        self.closed: tuple[np.ndarray, np.ndarray] = (np.empty(0, dtype=np.int64), np.empty(0))
        # the same streams as SimService: the same request sizes and start-up delays
        self.proc_s = draw_proc_times(profile, len(self.arrivals), rng)
        self._startup_rng = startup_rng(rng)
        self._done = (np.empty(0), np.empty(0))  # finish, latency: served, not yet counted
        self.instances: list[GpuInstance] = []
        self.batch = 1
        self.share = profile.gpu.ref_share_pct if profile.gpu else UNIT_PCT
        self.batch_wait_s = (
            BATCH_WAIT_OF_SLO * profile.slo_ms / 1000.0 if batch_wait_s is None else batch_wait_s
        )
        self._cursor = 0
        self._carry: np.ndarray = np.empty(0, dtype=np.int64)  # requests of a batch still open
        self._rr = 0

    # -- bookkeeping ---------------------------------------------------------------------------
    def active(self) -> list[GpuInstance]:
        return [i for i in self.instances if not i.draining]

    def desired(self) -> int:
        return len(self.active())

    def ready(self, now: float) -> int:
        return sum(1 for i in self.active() if i.ready_at <= now + EPS)

    def share_held(self, now: float) -> float:
        return sum(i.share for i in self.instances if not i.gone(now))

    def factor(self, share: float) -> float:
        g = self.profile.gpu
        return 1.0 if g is None else g.share_factor(share)

    def startup_delay(self) -> float:
        """Seconds from launch to ready, drawn as `SimService.startup_delay` draws them."""
        return draw_startup(self.profile, self._startup_rng)

    def forget(self, now: float) -> None:
        self.instances = [i for i in self.instances if not i.gone(now)]

    def feed(self, times: np.ndarray, origin: np.ndarray) -> None:
        """Routed arrivals (sorted, none before the last one fed): the chain's requests `origin`."""
        if self.origin is None:
            raise StateError(f"{self.profile.name}: takes its arrivals from its trace, not a chain")
        n, k = self._n, len(times)
        if k and n and times[0] < self.arrivals[n - 1] - EPS:
            raise StateError(f"{self.profile.name}: routed arrivals out of order")
        self.arrivals[n:n + k] = times
        self.origin[n:n + k] = origin
        self._n = n + k

    # -- one period ------------------------------------------------------------------------------
    def step(self, t0: float, t1: float, stretch: Mapping[int, float]) -> GpuStepOutcome:
        """Serve [t0, t1). `stretch[id(instance)]` is 1 + its interference term."""
        i0 = self._cursor
        i1 = i0 + int(np.searchsorted(self.arrivals[i0:self._n], t1, side="left"))
        self._cursor = i1
        new = i1 - i0
        req = np.concatenate([self._carry, np.arange(i0, i1, dtype=np.int64)])
        a = self.arrivals[req]
        starts, ready_t, carry_from = self._batches(a, t1)
        self._carry = req[carry_from:]
        nb = len(starts)
        sizes = np.diff(np.append(starts, carry_from)) if nb else np.empty(0, dtype=np.int64)
        draw_mean, nominal, base = self._batch_times(req[:carry_from], starts, sizes)
        finish = np.full(nb, np.nan)
        owner = np.full(nb, -1, dtype=np.int64)
        start_pending = [list(inst.pending) for inst in self.instances]
        bounds, cuts = self._spans(t0, t1, ready_t)
        waiting = max(1, math.ceil(self.profile.queue_limit / self.batch))  # batches that may wait
        limited = self.profile.rate_limit is not None
        tokens: list[np.ndarray] = [np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)]
        for k in range(len(bounds) - 1):
            j0, j1 = int(cuts[k]), int(cuts[k + 1])
            if j1 == j0:
                continue
            targets = self._accepting(bounds[k])
            if not targets:
                continue  # no ready instance: these batches are dropped
            m = len(targets)
            slot = (self._rr + np.arange(j1 - j0)) % m
            self._rr = (self._rr + j1 - j0) % m
            speed = np.array(
                [self.factor(self.instances[n].share) * stretch.get(id(self.instances[n]), 1.0)
                 for n in targets]
            )
            pend = [self.instances[n].pending for n in targets]
            who = np.asarray(targets)[slot]
            # tokens per instance and fixed window, before the queue (as SimService)
            if self._floored:  # the floor holds the batch and share factors together
                cost = self._floor_factors(sizes[j0:j1], who)
                felt = np.array([stretch.get(id(self.instances[n]), 1.0) for n in targets])
                times = draw_mean[j0:j1] * cost * felt[slot]
            else:
                cost, times = nominal[j0:j1], base[j0:j1] * speed[slot]
            adm = self._admit(ready_t[j0:j1], who, cost, tokens) if limited else slice(None)
            sub = finish[j0:j1]  # a view: batches not admitted stay NaN
            if self.profile.capacity == 1:
                sub[adm] = serve_fast(ready_t[j0:j1][adm], times[adm], slot[adm], pend, waiting)
            else:  # `pending` then holds the batches in the system, sorted by finish
                sub[adm] = serve_exact(ready_t[j0:j1][adm], times[adm], slot[adm], pend,
                                       self.profile.capacity, waiting)
            for n, p in zip(targets, pend, strict=True):
                self.instances[n].pending = p
            owner[j0:j1] = who
        if self.track:  # the chain's requests closed this period and their finish (NaN: dropped)
            ids = req[:carry_from]
            self.closed = (ids if self.origin is None else self.origin[ids],
                           np.repeat(finish, sizes) if nb else np.empty(0))
        return self._outcome(t0, t1, new, a[:carry_from],
                             _Batches(starts, sizes, ready_t, finish, owner, start_pending))

    def _batch_times(self, req: np.ndarray, starts: np.ndarray,
                     sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per closed batch of requests `req`: the mean of its draws, its time over one request's
        at 25 % (the batch factor), and their product."""
        if not len(starts):
            empty = np.empty(0)
            return empty, empty, empty
        draw_mean = np.add.reduceat(self.proc_s[req], starts) / sizes
        nominal = self._batch_factors(sizes)
        return draw_mean, nominal, draw_mean * nominal

    def _spans(self, t0: float, t1: float, ready_t: np.ndarray) -> tuple[list[float], np.ndarray]:
        """The period cut where an instance becomes ready or stops accepting, and the index of
        the first batch ready at or after each cut (`ready_t` sorted)."""
        changes = sorted(
            {x for inst in self.instances for x in (inst.ready_at, inst.accept_until) if t0 < x < t1}
        )
        bounds = [t0, *changes, t1]
        cuts = np.searchsorted(ready_t, bounds, side="left") if changes else np.array([0, len(ready_t)])
        return bounds, cuts

    def _accepting(self, at: float) -> list[int]:
        """The instances ready and accepting at `at`."""
        return [n for n, inst in enumerate(self.instances)
                if inst.ready_at <= at + EPS and inst.accept_until > at + EPS]

    def _admit(self, closes: np.ndarray, who: np.ndarray, nominal: np.ndarray,
               tokens: list[np.ndarray]) -> np.ndarray:
        """The published simulator's per-instance rate limit (`rate_limit_admit`) on batches. The
        profile's limit counts requests served one at a time on DRAFAS's 25 % (drl_utils.py:27-29:
        about one instance's throughput there); here a batch takes tokens in those units, its
        nominal time batch(k) x share(s) over one request's, so an instance admits about the work
        it can serve whatever its batch and share. In DRAFAS's configuration every batch is one
        request at 25 % and takes one token, exactly as in SimService."""
        limit, window = self.profile.rate_limit  # type: ignore[misc]
        if self._floored:  # `nominal` is already batch and share together (`_floor_factors`)
            cost = nominal
        else:
            factors = np.array([self.factor(inst.share) for inst in self.instances])
            cost = nominal * factors[who]
        if np.all(cost == 1.0):
            return rate_limit_admit(closes, who, limit, window, tokens)
        return rate_limit_admit(closes, who, limit, window, tokens, cost)

    @property
    def _floored(self) -> bool:
        g = self.profile.gpu
        return g is not None and g.floor > 0

    def _floor_factors(self, sizes: np.ndarray, who: np.ndarray) -> np.ndarray:
        """`GpuCurve.factor` of each batch (its size) on its instance (`who`, its share)."""
        g = self.profile.gpu
        shares = np.array([self.factor(inst.share) for inst in self.instances])[who]
        work = self._batch_factors(sizes) * shares
        return np.maximum(g.floor, work) / max(g.floor, 1.0)  # type: ignore[union-attr]

    def _batch_factors(self, sizes: np.ndarray) -> np.ndarray:
        g = self.profile.gpu
        if g is None or self.batch == 1:
            return np.ones(len(sizes))
        a, c, d = g.batch_curve
        return (a * sizes * sizes + c * sizes + d) / (a + c + d)

    def _batches(self, a: np.ndarray, t1: float) -> tuple[np.ndarray, np.ndarray, int]:
        """Close batches over sorted arrivals `a`: (first index of each batch, the time it closes,
        index from which requests stay in the still-open batch)."""
        n = len(a)
        if self.batch == 1:
            return np.arange(n), a.copy(), n
        b, wait = self.batch, self.batch_wait_s
        by_time = np.searchsorted(a, a + wait, side="right")  # first request too late to join i
        end = np.minimum(np.arange(n) + b, by_time)
        starts: list[int] = []
        closes: list[float] = []
        i = 0
        while i < n:
            e = int(end[i])
            close = a[e - 1] if e - i == b else a[i] + wait
            if close >= t1 - EPS:
                break  # the batch is still open at the end of the period
            starts.append(i)
            closes.append(float(close))
            i = e
        return np.asarray(starts, dtype=np.int64), np.asarray(closes), i

    def _outcome(self, t0: float, t1: float, new: int, a: np.ndarray,
                 batches: _Batches) -> GpuStepOutcome:
        """The period's figures (`a`: the arrivals of its closed batches). With `slo_counting`
        "completion" (default, as SimService and the published simulator) a served request counts
        in the period it finishes in, a dropped one in the period its batch closed in; with
        "arrival" every request counts in the period its batch closed in."""
        starts, sizes, ready_t, finish, owner, start_pending = (
            batches.starts, batches.sizes, batches.ready_t, batches.finish, batches.owner,
            batches.start_pending)
        nb = len(starts)
        req_finish = np.repeat(finish, sizes) if nb else np.empty(0)
        ok = ~np.isnan(req_finish)
        dropped = int(len(a) - ok.sum())
        if self.slo_counting == "completion":
            f_all = np.concatenate((self._done[0], req_finish[ok]))
            lat_all = np.concatenate((self._done[1], req_finish[ok] - a[ok]))
            now = window_of(f_all, t0, t1 - t0) < 1
            self._done = (f_all[~now], lat_all[~now])
            latency = lat_all[now]
        else:
            latency = req_finish[ok] - a[ok]
        served = len(latency)
        on_time = served - int(np.count_nonzero(latency > self.profile.slo_ms / 1000.0 + 1e-6))
        counted = served + dropped
        util = self._utilization(t0, t1, ready_t, finish, owner, start_pending)
        ready = sum(1 for i in self.instances if not i.draining and i.ready_at <= t1 + EPS)
        window = WindowMetrics(
            service=self.profile.name,
            seconds=t1 - t0,
            arrivals=new,
            completed=counted,
            violations=counted - on_time,
            utilization=util,
            instances=ready,
            mean_latency_ms=1000.0 * float(latency.mean()) if served else None,
            queue_length=(self._queued(t1, sizes, finish, owner, start_pending) if self.measure_queue
                          else None),
            dropped=dropped,
            # measured, as the queue, only while a policy reads its windows
            **(latency_percentiles(1000.0 * latency) if self.measure_queue else {}),
        )
        return GpuStepOutcome(window, counted, served, on_time, dropped, float(latency.sum()), nb)

    def _queued(self, t1, sizes, finish, owner, start_pending) -> int:
        """Requests waiting at `t1`: those of the central queue's open batch, and those of the
        batches queued behind the `capacity` each instance is serving (FIFO: the ones that finish
        first are served first); a batch of an earlier period still waiting counts as a full
        batch."""
        waiting = len(self._carry)
        cap = self.profile.capacity
        live = ~np.isnan(finish) & (finish > t1 + EPS)
        for k, held in enumerate(start_pending):
            old = sum(1 for f in held if f > t1 + EPS)
            mine = live & (owner == k)
            new = sizes[mine][np.argsort(finish[mine])] if mine.any() else sizes[:0]
            queued = [self.batch] * old + new.tolist()  # in the order they finish
            waiting += int(sum(queued[cap:]))
        return waiting

    def _utilization(self, t0, t1, ready_t, finish, owner, start_pending) -> float:
        """Mean over per-second samples of the mean over present (not draining) instances of
        min(batches in the system, capacity) / capacity: the dissertation's instance utilization."""
        # on the second, as the DRAFAS simulator's monitor (SimOptions.util_sample_phase = 0)
        samples = t0 + np.arange(max(1, round(t1 - t0)), dtype=np.float64) - 1e-6
        total = np.zeros(len(samples))
        present = np.zeros(len(samples))
        ok = ~np.isnan(finish)
        for k, inst in enumerate(self.instances):
            # samples sit 1 µs before the second: an instance created on it counts there, one that
            # stops taking batches on it does not (SimService: a draining instance is not counted)
            alive = (samples + 1e-6 >= inst.created_at - EPS) & (samples + 1e-6 < inst.accept_until - EPS)
            if not alive.any():
                continue
            mine = ok & (owner == k)
            in_flight = np.searchsorted(ready_t[mine], samples, side="right") - np.searchsorted(
                np.sort(finish[mine]), samples, side="right"
            )
            if start_pending[k]:
                in_flight += len(start_pending[k]) - np.searchsorted(start_pending[k], samples, "right")
            cap = self.profile.capacity
            total += np.where(alive, np.minimum(in_flight, cap) / cap, 0.0)
            present += alive
        seen = present > 0
        if not seen.any():
            return 0.0
        return float(np.mean(total[seen] / present[seen]))

