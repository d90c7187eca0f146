"""The simulator's GPU cluster (issue 15): services of batched instances on MPS shares of GPUs.

How one service closes and serves its batches is `testbed.sim.batched_service`; how a declared chain
(`chains=`: services s1 -> s2 -> ... under one end-to-end SLA) routes its requests is
`testbed.sim.chains`, `chain_results()` giving each chain's figures.

A share change restarts the replicas as InSS's shadow mechanism does (Section 5.5): new instances
start (startup time) while the old ones keep serving and holding their share, and the old ones
drain once the new ones are ready. A batch-size change applies at once (FA2 Section III).

DRAFAS's tables still run on `testbed.sim.service` / `cluster` (chunks of many periods, faster).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from testbed.cluster.base import ServiceTarget
from testbed.errors import ConfigError, ConfigProblem, StateError
from testbed.load.trace import Trace, arrival_times
from testbed.metrics.window import WindowMetrics
from testbed.profiles import ServiceProfile, gpu_stretches
from testbed.profiles.paper import STEP_SECONDS
from testbed.sim.backend import SimBackend
from testbed.sim.batched_service import EPS, UNIT_PCT, BatchedService, GpuInstance, GpuStepOutcome
from testbed.sim.chains import Chain, ChainLog, ChainRouter, check_chains, upstream_stages
from testbed.sim.placement import place

__all__ = ["UNIT_PCT", "GpuSimCluster"]  # importers take UNIT_PCT from here too


class GpuSimCluster(SimBackend[BatchedService, GpuStepOutcome]):
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
        feeds = upstream_stages(self.chains)
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
        self._end = np.inf
        self.sims = self._services(profiles, traces, ratios, seed, rounding, slo_counting)
        heads = [c.services[0] for c in self.chains]
        self.router = ChainRouter(self.chains, list(profiles),
                                  {head: len(self.sims[head].arrivals) for head in heads})
        self._start(profiles, initial or {})
        self.last_outcome: dict[str, GpuStepOutcome] = {}

    def _services(self, profiles: Mapping[str, ServiceProfile], traces: Mapping[str, Trace],
                  ratios: Mapping[str, float], seed: int, rounding: str,
                  slo_counting: str) -> dict[str, BatchedService]:
        """Each service's simulator, in the profiles' order; a later stage of a chain takes its
        arrivals from the stage before it. Sets `_end` to the shortest trace's seconds."""
        feeds = upstream_stages(self.chains)
        sims: dict[str, BatchedService] = {}
        rngs = dict(zip(profiles, np.random.SeedSequence(seed).spawn(len(profiles)), strict=True))
        heads = {c.services[0] for c in self.chains}
        for name in (*heads, *(n for n in profiles if n not in heads)):  # heads first: their counts
            profile = profiles[name]
            if name in feeds:
                head = next(c.services[0] for c in self.chains if name in c.services)
                sims[name] = BatchedService(
                    profile, np.empty(0), np.random.default_rng(rngs[name]), slo_counting=slo_counting,
                    routed=len(sims[head].arrivals),
                )
            else:
                sims[name] = BatchedService(
                    profile, arrival_times(traces[name], ratios[name], rounding),
                    np.random.default_rng(rngs[name]), slo_counting=slo_counting,
                )
                self._end = min(self._end, traces[name].seconds)
            sims[name].track = name in heads or name in feeds
        return {name: sims[name] for name in profiles}

    def _start(self, profiles: Mapping[str, ServiceProfile], initial: Mapping[str, ServiceTarget]) -> None:
        """Place each service's starting replicas (`initial`'s, else the profile's), ready at once."""
        for name, profile in profiles.items():
            start = initial.get(name) or ServiceTarget(
                max(profile.initial_replicas, 1), self.sims[name].share, 1
            )
            applied = self.configure(name, start, startup=False)
            if applied.replicas < start.replicas:
                raise ConfigError(
                    [ConfigProblem(self.source, None, f"{name}.replicas",
                                   f"{start.replicas} replicas of {start.share_pct:g} % do not fit on "
                                   f"{self.gpus} GPUs beside the others")]
                )

    @property
    def chain_log(self) -> list[ChainLog]:
        """Each declared chain's `ChainLog`, in the order of `chains`."""
        return self.router.logs

    # -- ClusterBackend --------------------------------------------------------------------------
    def scale(self, service: str, replicas: int) -> None:
        sim = self._sim(service)
        if replicas < 1:
            raise StateError(f"{service}: cannot scale below one replica (asked {replicas})")
        applied = self.configure(service, self.target(service).scaled(replicas))
        if applied.replicas != replicas:
            raise StateError(f"{service}: {replicas} replicas of {sim.share:g} % do not fit")

    def units_per_replica(self, service: str) -> int:
        return max(1, math.ceil(self._sim(service).share / self.unit_pct - EPS))

    def total_units(self) -> int:
        return int(self.gpus * 100 / self.unit_pct + EPS)

    def free_units(self) -> int:
        return sum(int(free / self.unit_pct + EPS) for free in self.gpu_free_pct())

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
        if prof.gpu is None and (target.batch != 1 or abs(target.share_pct - sim.share) > EPS):
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
        if active and abs(target.share_pct - sim.share) <= EPS:
            for inst in reversed(active[target.replicas:]):
                inst.accept_until = now  # drains its queue, then frees its share
            wanted = target.gpus[len(active):] if target.gpus is not None else None
            added = self._launch(sim, place(free, target.share_pct, target.replicas - len(active), wanted),
                                 target.share_pct, now, delay)
            return ServiceTarget(min(target.replicas, len(active)) + added, sim.share, sim.batch)
        added = self._launch(sim, place(free, target.share_pct, target.replicas, target.gpus),
                             target.share_pct, now, delay)
        if added == 0:
            return ServiceTarget(max(len(active), 1), sim.share, sim.batch)
        ready_at = max(i.ready_at for i in sim.instances[-added:])
        for inst in active:  # shadow: the old ones serve until all the new ones are ready
            inst.accept_until = ready_at if inst.ready_at <= now else now
        sim.share = target.share_pct
        sim.forget(now)
        return ServiceTarget(added, sim.share, sim.batch)

    @staticmethod
    def _launch(sim: BatchedService, gpus: list[int], share: float, now: float,
                delay: Callable[[], float]) -> int:
        """Start one instance of `share` on each of `gpus`, each ready after its own start-up draw
        (`delay()`); returns how many."""
        for gpu in gpus:
            sim.instances.append(GpuInstance(gpu, share, now, now + delay()))
        return len(gpus)

    # -- simulation ----------------------------------------------------------------------------------
    def stretches(self, at: float) -> dict[int, float]:
        """1 + InSS's interference term for every instance, from the ready instances beside it."""
        if not self.interference:
            return {}
        placed = [(id(inst), inst.gpu, inst.share, sim.profile.gpu)
                  for sim in self.sims.values() for inst in sim.instances
                  if inst.ready_at <= at + EPS and not inst.gone(at)]
        return gpu_stretches(placed)  # type: ignore[return-value]

    def advance(self) -> dict[str, WindowMetrics]:
        t0, t1 = self.now, self.now + self.step_seconds
        stretch = self.stretches(t0)
        outcome = {}
        for name in self.router.order:  # a chain's stages in order, each fed by the one before
            sim = self.sims[name]
            self.router.deliver(name, sim, t1)
            outcome[name] = sim.step(t0, t1, stretch)
            self.router.route(name, sim)
        self.last_outcome = {name: outcome[name] for name in self.sims}
        self.now = t1
        for sim in self.sims.values():
            sim.forget(t1)
        return {name: out.window for name, out in self.last_outcome.items()}

    def chain_results(self) -> list[dict[str, float | int | str]]:
        """Per chain, over the requests resolved so far (see `ChainLog.result`)."""
        return [log.result(self.now) for log in self.chain_log]
