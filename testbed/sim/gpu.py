"""GPUs, MPS shares, batches and interference in the simulator (issue 15): the batched path.

A `GpuSimCluster` has GPUs; each instance of a service holds one GPU's share (%), and all instances
of a service share its batch size. A service keeps one central queue (FA2 Section V, InSS's task
buffer) that closes a batch when it holds `batch` requests or when its first request has waited
`batch_wait` (a fraction of the SLO, like a serving system's max queue delay); closed batches go
round-robin to the ready instances, each a FIFO of batches dropping a batch when
ceil(queue_limit / batch) batches already wait. A batch of k requests takes

    mean draw of its requests (Table 4.4's range) * batch(k) * share(s) * (1 + interference)

from the profile's `gpu` curve, the interference term (InSS Section 4.1) summing the other ready
instances on the same GPU. The published simulator's choices are the DRAFAS simulator's pieces,
reused: the per-instance rate limit (`rate_limit_admit`, a batch taking tokens by its nominal
time), start-up delays in whole seconds up to `startup_max_ms` (`draw_startup`, the same stream),
and a request's SLO counted in the period it finishes in. With batch 1 the batches are the
requests and the FIFO is `testbed.sim.queueing.serve_fast`, the DRAFAS kernel, so the DRAFAS
configuration (25 % slices, batch 1, `interference=False`) gives `SimService`'s periods exactly
(tests/sim/test_gpu.py, bench/gpu_drafas.py).

A share change restarts the replicas as InSS's shadow mechanism does (Section 5.5): new instances
start (startup time) while the old ones keep serving and holding their share, and the old ones
drain once the new ones are ready. A batch-size change applies at once (FA2 Section III).

A declared chain (`chains=`: services s1 -> s2 -> ... under one end-to-end SLA) is routed: s1
takes its arrivals from its own trace, and each request a stage completes (not drops) arrives at the
next stage at its finish time. Per period the stages are served in chain order; a completion
inside the period reaches the next stage in the same period, a later one is carried to the period
it finishes in. A later stage takes no arrivals from its own trace. `chain_results()` gives per
chain the end-to-end latency (first arrival to last finish), the share of requests late or
dropped anywhere, and the requests completed within the SLA.

DRAFAS's tables still run on `testbed.sim.service` / `cluster` (chunks of many periods, faster).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from testbed.cluster.base import ServiceTarget
from testbed.errors import ConfigError, ConfigProblem, StateError
from testbed.load.trace import Trace, arrival_times
from testbed.metrics.window import WindowMetrics
from testbed.profiles import ServiceProfile, gpu_stretches
from testbed.profiles.paper import STEP_SECONDS
from testbed.sim.queueing import serve_fast
from testbed.sim.service import (
    SLO_COUNTING,
    draw_proc_times,
    draw_startup,
    rate_limit_admit,
    startup_rng,
    window_of,
)

UNIT_PCT = 25.0  # DRAFAS's resource unit: a quarter of a GPU (Table 4.3)
BATCH_WAIT_OF_SLO = 0.25  # a batch closes after its first request waited this fraction of the SLO
_EPS = 1e-9


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
        return self.accept_until <= now + _EPS and (not self.pending or self.pending[-1] <= now + _EPS)


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


class Chain(Protocol):
    """What the simulator needs of a declared pipeline (`testbed.scaler.fa2.Pipeline` is one)."""

    @property
    def services(self) -> Sequence[str]: ...

    @property
    def sla_ms(self) -> float: ...


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
        if profile.capacity != 1:
            raise ConfigError(
                [ConfigProblem("<sim>", None, f"{profile.name}.capacity",
                               "the GPU simulator serves one batch at a time per instance (capacity 1)")]
            )
        self.profile = profile
        self.slo_counting = slo_counting
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
        return sum(1 for i in self.active() if i.ready_at <= now + _EPS)

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
        if k and n and times[0] < self.arrivals[n - 1] - _EPS:
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
        if nb:
            draw_mean = np.add.reduceat(self.proc_s[req[:carry_from]], starts) / sizes
            nominal = self._batch_factors(sizes)  # a batch's time over one request's, at 25 %
            base = draw_mean * nominal
        else:
            nominal = base = np.empty(0)
        finish = np.full(nb, np.nan)
        owner = np.full(nb, -1, dtype=np.int64)
        start_pending = [list(inst.pending) for inst in self.instances]
        changes = sorted(
            {x for inst in self.instances for x in (inst.ready_at, inst.accept_until) if t0 < x < t1}
        )
        bounds = [t0, *changes, t1]
        cuts = np.searchsorted(ready_t, bounds, side="left") if changes else np.array([0, nb])
        waiting = max(1, math.ceil(self.profile.queue_limit / self.batch))  # batches that may wait
        limited = self.profile.rate_limit is not None
        tokens: list[np.ndarray] = [np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)]
        for k in range(len(bounds) - 1):
            j0, j1 = int(cuts[k]), int(cuts[k + 1])
            if j1 == j0:
                continue
            at = bounds[k]
            targets = [
                n for n, inst in enumerate(self.instances)
                if inst.ready_at <= at + _EPS and inst.accept_until > at + _EPS
            ]
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
            adm = self._admit(ready_t[j0:j1], who, nominal[j0:j1], tokens) if limited else slice(None)
            sub = finish[j0:j1]  # a view: batches not admitted stay NaN
            sub[adm] = serve_fast(ready_t[j0:j1][adm], (base[j0:j1] * speed[slot])[adm], slot[adm],
                                  pend, waiting)
            for n, p in zip(targets, pend, strict=True):
                self.instances[n].pending = p
            owner[j0:j1] = who
        if self.track:  # the chain's requests closed this period and their finish (NaN: dropped)
            ids = req[:carry_from]
            self.closed = (ids if self.origin is None else self.origin[ids],
                           np.repeat(finish, sizes) if nb else np.empty(0))
        return self._outcome(t0, t1, new, a[:carry_from], starts, sizes, ready_t, finish, owner,
                             start_pending)

    def _admit(self, closes: np.ndarray, who: np.ndarray, nominal: np.ndarray,
               tokens: list[np.ndarray]) -> np.ndarray:
        """The published simulator's per-instance rate limit (`rate_limit_admit`) on batches. The
        profile's limit counts requests served one at a time on DRAFAS's 25 % (drl_utils.py:27-29:
        about one instance's throughput there); here a batch takes tokens in those units, its
        nominal time batch(k) x share(s) over one request's, so an instance admits about the work
        it can serve whatever its batch and share. In DRAFAS's configuration every batch is one
        request at 25 % and takes one token, exactly as in SimService."""
        limit, window = self.profile.rate_limit  # type: ignore[misc]
        factors = np.array([self.factor(inst.share) for inst in self.instances])
        cost = nominal * factors[who]
        if np.all(cost == 1.0):
            return rate_limit_admit(closes, who, limit, window, tokens)
        return rate_limit_admit(closes, who, limit, window, tokens, cost)

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
            if close >= t1 - _EPS:
                break  # the batch is still open at the end of the period
            starts.append(i)
            closes.append(float(close))
            i = e
        return np.asarray(starts, dtype=np.int64), np.asarray(closes), i

    def _outcome(self, t0, t1, new, a, starts, sizes, ready_t, finish, owner, start_pending):
        """The period's figures. With `slo_counting` "completion" (default, as SimService and the
        published simulator) a served request counts in the period it finishes in, a dropped one
        in the period its batch closed in; with "arrival" every request counts in the period its
        batch closed in."""
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
        ready = sum(1 for i in self.instances if not i.draining and i.ready_at <= t1 + _EPS)
        window = WindowMetrics(
            service=self.profile.name,
            seconds=t1 - t0,
            arrivals=new,
            completed=counted,
            violations=counted - on_time,
            utilization=util,
            instances=ready,
            mean_proc_time_ms=1000.0 * float(latency.mean()) if served else None,
        )
        return GpuStepOutcome(window, counted, served, on_time, dropped, float(latency.sum()), nb)

    def _utilization(self, t0, t1, ready_t, finish, owner, start_pending) -> float:
        """Mean over per-second samples of the mean over present (not draining) instances of
        min(batches in the system, 1): the dissertation's instance utilization, capacity 1."""
        # on the second, as the DRAFAS simulator's monitor (SimOptions.util_sample_phase = 0)
        samples = t0 + np.arange(max(1, round(t1 - t0)), dtype=np.float64) - 1e-6
        total = np.zeros(len(samples))
        present = np.zeros(len(samples))
        ok = ~np.isnan(finish)
        for k, inst in enumerate(self.instances):
            # samples sit 1 µs before the second: an instance created on it counts there, one that
            # stops taking batches on it does not (SimService: a draining instance is not counted)
            alive = (samples + 1e-6 >= inst.created_at - _EPS) & (samples + 1e-6 < inst.accept_until - _EPS)
            if not alive.any():
                continue
            mine = ok & (owner == k)
            in_flight = np.searchsorted(ready_t[mine], samples, side="right") - np.searchsorted(
                np.sort(finish[mine]), samples, side="right"
            )
            if start_pending[k]:
                in_flight += len(start_pending[k]) - np.searchsorted(start_pending[k], samples, "right")
            total += np.where(alive, np.minimum(in_flight, 1), 0.0)
            present += alive
        seen = present > 0
        if not seen.any():
            return 0.0
        return float(np.mean(total[seen] / present[seen]))


class GpuSimCluster:
    """Services on `gpus` GPUs fed by trace-replaying clients; a `GpuClusterBackend`.

    Units (DRAFAS's action mask, Eq. 3.2's cost) are `unit_pct` (25 %) of a GPU: 8 units = 2 GPUs.
    """

    def __init__(
        self,
        profiles: Mapping[str, ServiceProfile],
        traces: Mapping[str, Trace],
        ratios: Mapping[str, float],
        *,
        gpus: int,
        seed: int = 0,
        step_seconds: float = STEP_SECONDS,
        interference: bool = True,
        unit_pct: float = UNIT_PCT,
        rounding: str = "floor",
        initial: Mapping[str, ServiceTarget] | None = None,
        source: str = "<sim>",
        slo_counting: str = "completion",
        chains: Sequence[Chain] = (),
    ):
        self.chains = check_chains(chains, profiles, source)
        feeds = {c.services[k + 1]: c.services[k] for c in self.chains for k in range(len(c.services) - 1)}
        missing = [name for name in profiles
                   if name not in feeds and (name not in traces or name not in ratios)]
        if missing:
            raise ConfigError([ConfigProblem(source, None, n, "no trace or ratio given") for n in missing])
        if gpus < 1:
            raise ConfigError([ConfigProblem(source, None, "gpus", f"need at least one GPU, got {gpus}")])
        self.gpus = gpus
        self.unit_pct = unit_pct
        self.interference = interference
        self.step_seconds = step_seconds
        self.now = 0.0
        self.source = source
        self.sims: dict[str, BatchedService] = {}
        self._end = np.inf
        rngs = dict(zip(profiles, np.random.SeedSequence(seed).spawn(len(profiles)), strict=True))
        heads = {c.services[0] for c in self.chains}
        for name in (*heads, *(n for n in profiles if n not in heads)):  # heads first: their counts
            profile = profiles[name]
            if name in feeds:
                head = next(c.services[0] for c in self.chains if name in c.services)
                self.sims[name] = BatchedService(
                    profile, np.empty(0), np.random.default_rng(rngs[name]), slo_counting=slo_counting,
                    routed=len(self.sims[head].arrivals),
                )
            else:
                self.sims[name] = BatchedService(
                    profile, arrival_times(traces[name], ratios[name], rounding),
                    np.random.default_rng(rngs[name]), slo_counting=slo_counting,
                )
                self._end = min(self._end, traces[name].seconds)
            self.sims[name].track = name in heads or name in feeds
        self.sims = {name: self.sims[name] for name in profiles}  # the profiles' order
        # stages in chain order, then the rest: a stage is served before the one it feeds
        self._order = [*(s for c in self.chains for s in c.services),
                       *(n for n in profiles if n not in heads and n not in feeds)]
        self._feeds = {up: down for down, up in feeds.items()}
        self._pool = {name: (np.empty(0), np.empty(0, dtype=np.int64)) for name in feeds}
        self.chain_log = [ChainLog(c, len(self.sims[c.services[0]].arrivals)) for c in self.chains]
        self._log_of = {s: (log, k) for log in self.chain_log for k, s in enumerate(log.services)}
        for name, profile in profiles.items():
            start = (initial or {}).get(name) or ServiceTarget(
                max(profile.initial_replicas, 1), self.sims[name].share, 1
            )
            applied = self.configure(name, start, startup=False)
            if applied.replicas < start.replicas:
                raise ConfigError(
                    [ConfigProblem(source, None, f"{name}.replicas",
                                   f"{start.replicas} replicas of {start.share_pct:g} % do not fit on "
                                   f"{gpus} GPUs beside the others")]
                )
        self.last_outcome: dict[str, GpuStepOutcome] = {}

    # -- ClusterBackend --------------------------------------------------------------------------
    def services(self) -> list[str]:
        return list(self.sims)

    def desired_replicas(self, service: str) -> int:
        return self._sim(service).desired()

    def ready_replicas(self, service: str) -> int:
        return self._sim(service).ready(self.now)

    def scale(self, service: str, replicas: int) -> None:
        sim = self._sim(service)
        if replicas < 1:
            raise StateError(f"{service}: cannot scale below one replica (asked {replicas})")
        applied = self.configure(service, self.target(service).scaled(replicas))
        if applied.replicas != replicas:
            raise StateError(f"{service}: {replicas} replicas of {sim.share:g} % do not fit")

    def units_per_replica(self, service: str) -> int:
        return max(1, math.ceil(self._sim(service).share / self.unit_pct - _EPS))

    def total_units(self) -> int:
        return int(self.gpus * 100 / self.unit_pct + _EPS)

    def free_units(self) -> int:
        return sum(int(free / self.unit_pct + _EPS) for free in self.gpu_free_pct())

    def endpoint(self, service: str) -> str:
        self._sim(service)
        return f"sim://{service}"

    # -- GpuClusterBackend --------------------------------------------------------------------------
    def target(self, service: str) -> ServiceTarget:
        sim = self._sim(service)
        active = sim.active()
        return ServiceTarget(
            max(len(active), 1), sim.share, sim.batch, tuple(i.gpu for i in active) if active else None
        )

    def gpu_free_pct(self) -> list[float]:
        used = [0.0] * self.gpus
        for sim in self.sims.values():
            for inst in sim.instances:
                if not inst.gone(self.now):
                    used[inst.gpu] += inst.share
        return [max(0.0, 100.0 - u) for u in used]

    def share_used_pct(self, service: str) -> float:
        return self._sim(service).share_held(self.now)

    def configure(self, service: str, target: ServiceTarget, *, startup: bool = True) -> ServiceTarget:
        """Apply `target` as far as it fits (see GpuClusterBackend); returns what was applied."""
        sim = self._sim(service)
        prof = sim.profile
        if prof.gpu is None and (target.batch != 1 or abs(target.share_pct - sim.share) > _EPS):
            raise ConfigError(
                [ConfigProblem(self.source, None, f"{service}.gpu",
                               "the profile has no gpu curve: only batch 1 at its own share is known")]
            )
        if prof.gpu is not None and target.batch > prof.gpu.max_batch:
            raise ConfigError(
                [ConfigProblem(self.source, None, f"{service}.batch",
                               f"batch {target.batch} above the profile's max_batch {prof.gpu.max_batch}")]
            )
        if target.gpus is not None and any(not 0 <= g < self.gpus for g in target.gpus):
            raise ConfigError(
                [ConfigProblem(self.source, None, f"{service}.gpus",
                               f"GPU index outside 0..{self.gpus - 1}: {list(target.gpus)}")]
            )
        sim.batch = target.batch
        now = self.now
        delay = sim.startup_delay if startup else (lambda: 0.0)
        active = sim.active()
        free = self.gpu_free_pct()
        if active and abs(target.share_pct - sim.share) <= _EPS:
            for inst in reversed(active[target.replicas:]):
                inst.accept_until = now  # drains its queue, then frees its share
            wanted = target.gpus[len(active):] if target.gpus is not None else None
            added = self._place(sim, target.replicas - len(active), target.share_pct, wanted, free, now,
                                delay)
            return ServiceTarget(min(target.replicas, len(active)) + added, sim.share, sim.batch)
        added = self._place(sim, target.replicas, target.share_pct, target.gpus, free, now, delay)
        if added == 0:
            return ServiceTarget(max(len(active), 1), sim.share, sim.batch)
        ready_at = max(i.ready_at for i in sim.instances[-added:])
        for inst in active:  # shadow: the old ones serve until all the new ones are ready
            inst.accept_until = ready_at if inst.ready_at <= now else now
        sim.share = target.share_pct
        sim.forget(now)
        return ServiceTarget(added, sim.share, sim.batch)

    def _place(self, sim, count, share, wanted, free, now, delay) -> int:
        """Put up to `count` new instances of `share` on GPUs (`wanted`'s, else the first that
        fits), each ready after its own start-up draw (`delay()`); returns how many fit."""
        added = 0
        for k in range(max(count, 0)):
            options = [wanted[k]] if wanted is not None else range(self.gpus)
            gpu = next((g for g in options if free[g] + _EPS >= share), None)
            if gpu is None:
                continue
            free[gpu] -= share
            sim.instances.append(GpuInstance(gpu, share, now, now + delay()))
            added += 1
        return added

    # -- simulation ----------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.now + self.step_seconds > self._end + 1e-9

    def stretches(self, at: float) -> dict[int, float]:
        """1 + InSS's interference term for every instance, from the ready instances beside it."""
        if not self.interference:
            return {}
        placed = [(id(inst), inst.gpu, inst.share, sim.profile.gpu)
                  for sim in self.sims.values() for inst in sim.instances
                  if inst.ready_at <= at + _EPS and not inst.gone(at)]
        return gpu_stretches(placed)  # type: ignore[return-value]

    def advance(self) -> dict[str, WindowMetrics]:
        t0, t1 = self.now, self.now + self.step_seconds
        stretch = self.stretches(t0)
        if not self.chains:
            self.last_outcome = {name: sim.step(t0, t1, stretch) for name, sim in self.sims.items()}
        else:
            outcome = {}
            for name in self._order:
                sim = self.sims[name]
                if name in self._pool:  # completions of the stage before, up to the period's end
                    times, origin = self._pool[name]
                    now = times < t1
                    sim.feed(times[now], origin[now])
                    self._pool[name] = (times[~now], origin[~now])
                    self._log_of[name][0].arrived(self._log_of[name][1], origin[now], times[now])
                outcome[name] = sim.step(t0, t1, stretch)
                self._route(name, sim)
            self.last_outcome = {name: outcome[name] for name in self.sims}
        self.now = t1
        for sim in self.sims.values():
            sim.forget(t1)
        return {name: out.window for name, out in self.last_outcome.items()}

    def _route(self, name: str, sim: BatchedService) -> None:
        """Record the stage's closed requests in its chain; hand its completions to the next."""
        origin, finish = sim.closed
        if name not in self._log_of:
            return
        log, k = self._log_of[name]
        if k == 0:  # the first stage's requests are its trace's, in order
            log.arrived(0, origin, sim.arrivals[origin])
        log.closed(k, origin, finish)
        down = self._feeds.get(name)
        if down is None or not len(origin):
            return
        ok = ~np.isnan(finish)
        times = np.concatenate((self._pool[down][0], finish[ok]))
        ids = np.concatenate((self._pool[down][1], origin[ok]))
        order = np.argsort(times, kind="stable")
        self._pool[down] = (times[order], ids[order])

    def chain_results(self) -> list[dict[str, float | int | str]]:
        """Per chain, over the requests resolved so far (see `ChainLog.result`)."""
        return [log.result(self.now) for log in self.chain_log]

    def latest_window(self, service: str) -> WindowMetrics:
        if service not in self.last_outcome:
            raise StateError(f"{service}: no period simulated yet")
        return self.last_outcome[service].window

    def _sim(self, service: str) -> BatchedService:
        try:
            return self.sims[service]
        except KeyError:
            raise ConfigError(
                [ConfigProblem(self.source, None, "service",
                               f"unknown service {service!r}; known: {', '.join(self.sims)}")]
            ) from None


def check_chains(chains: Sequence[Chain], services: Mapping[str, object], source: str) -> list[Chain]:
    """Chains of known services, each service in at most one chain and once: one error naming
    every problem (`pipelines[i].services` in `source`)."""
    problems = []
    seen: dict[str, int] = {}
    for i, c in enumerate(chains):
        if not c.services:
            problems.append(ConfigProblem(source, None, f"pipelines[{i}].services", "an empty chain"))
        if c.sla_ms <= 0:
            problems.append(ConfigProblem(source, None, f"pipelines[{i}].sla_ms",
                                          f"must be > 0, got {c.sla_ms:g}"))
        for j, s in enumerate(c.services):
            where = f"pipelines[{i}].services[{j}]"
            if s not in services:
                problems.append(ConfigProblem(source, None, where,
                                              f"unknown service {s!r}; known: {', '.join(services)}"))
            elif s in seen:
                problems.append(ConfigProblem(source, None, where,
                                              f"{s} is already a stage of pipelines[{seen[s]}]: a "
                                              "service is in one chain, once"))
            seen.setdefault(s, i)
    if problems:
        raise ConfigError(problems)
    return list(chains)


class ChainLog:
    """Each request of one chain, by its index at the first stage: when it arrived at and finished
    each stage (NaN: not yet, or dropped), and the stage that dropped it (-1: none)."""

    def __init__(self, chain: Chain, requests: int):
        self.services = tuple(chain.services)
        self.sla_ms = float(chain.sla_ms)
        k = len(self.services)
        self.arrival = np.full((k, requests), np.nan)
        self.finish = np.full((k, requests), np.nan)
        self.dropped_at = np.full(requests, -1, dtype=np.int64)

    def arrived(self, stage: int, origin: np.ndarray, times: np.ndarray) -> None:
        self.arrival[stage, origin] = times

    def closed(self, stage: int, origin: np.ndarray, finish: np.ndarray) -> None:
        self.finish[stage, origin] = finish
        drop = np.isnan(finish)
        self.dropped_at[origin[drop]] = stage

    def result(self, now: float) -> dict[str, float | int | str]:
        """Requests resolved by `now` (finished at the last stage by then, or dropped anywhere):
        end-to-end latency = last finish - first arrival; a violation is late or dropped."""
        last = self.finish[-1]
        done = ~np.isnan(last) & (last <= now + _EPS)
        e2e = (last[done] - self.arrival[0, done]) * 1000.0
        late = int(np.count_nonzero(e2e > self.sla_ms + 1e-3))
        dropped = int(np.count_nonzero(self.dropped_at >= 0))
        resolved = int(done.sum()) + dropped
        stage = self.finish - self.arrival  # NaN where a request did not finish the stage
        return {
            "pipeline": ">".join(self.services),
            "sla_ms": self.sla_ms,
            "requests": resolved,
            "completed": int(done.sum()),
            "dropped": dropped,
            "late": late,
            "on_time": int(done.sum()) - late,
            "violation_rate": (late + dropped) / resolved if resolved else 0.0,
            "mean_e2e_ms": float(e2e.mean()) if len(e2e) else float("nan"),
            "p99_e2e_ms": float(np.percentile(e2e, 99)) if len(e2e) else float("nan"),
            "dropped_per_stage": [int(np.count_nonzero(self.dropped_at == k))
                                  for k in range(len(self.services))],
            "stage_mean_ms": [float(np.nanmean(x)) * 1000.0 if np.any(~np.isnan(x)) else float("nan")
                              for x in stage],
        }
