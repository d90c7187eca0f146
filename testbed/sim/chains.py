"""Chains of services under one end-to-end SLA: checked, routed stage to stage, and logged per request.

A declared chain (s1 -> s2 -> ...) is routed: s1 takes its arrivals from its own trace, and each
request a stage completes (not drops) arrives at the next stage at its finish time. Per period the
stages are served in chain order; a completion inside the period reaches the next stage in the same
period, a later one is carried to the period it finishes in. A later stage takes no arrivals from
its own trace. `ChainLog.result` gives per chain the end-to-end latency (first arrival to last
finish), the share of requests late or dropped anywhere, and the requests completed within the SLA.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from testbed.errors import ConfigError, ConfigProblem
from testbed.sim.batched_service import EPS, BatchedService


class Chain(Protocol):
    """What the simulator needs of a declared pipeline (`testbed.scaler.fa2.Pipeline` is one)."""

    @property
    def services(self) -> Sequence[str]: ...

    @property
    def sla_ms(self) -> float: ...


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
        done = ~np.isnan(last) & (last <= now + EPS)
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


def upstream_stages(chains: Sequence[Chain]) -> dict[str, str]:
    """Each later stage of a chain -> the stage that feeds it."""
    return {c.services[k + 1]: c.services[k] for c in chains for k in range(len(c.services) - 1)}


class ChainRouter:
    """The completions on their way from one stage to the next, and each chain's `ChainLog`.

    `requests`: the number of requests of each chain's first stage (its trace's arrivals)."""

    def __init__(self, chains: Sequence[Chain], services: Sequence[str], requests: Mapping[str, int]):
        feeds = upstream_stages(chains)
        heads = {c.services[0] for c in chains}
        # stages in chain order, then the rest: a stage is served before the one it feeds
        self.order = [*(s for c in chains for s in c.services),
                      *(n for n in services if n not in heads and n not in feeds)]
        self._feeds = {up: down for down, up in feeds.items()}
        self._pool = {name: (np.empty(0), np.empty(0, dtype=np.int64)) for name in feeds}
        self.logs = [ChainLog(c, requests[c.services[0]]) for c in chains]
        self._log_of = {s: (log, k) for log in self.logs for k, s in enumerate(log.services)}

    def deliver(self, name: str, sim: BatchedService, until: float) -> None:
        """Feed a later stage the completions of the stage before it up to `until`."""
        if name not in self._pool:
            return
        times, origin = self._pool[name]
        now = times < until
        sim.feed(times[now], origin[now])
        self._pool[name] = (times[~now], origin[~now])
        self._log_of[name][0].arrived(self._log_of[name][1], origin[now], times[now])

    def route(self, name: str, sim: BatchedService) -> None:
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
