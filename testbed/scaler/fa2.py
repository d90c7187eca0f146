"""FA2 (papers/002, Section IV): instance counts and batch sizes per DNN by dynamic programming over
an SLA time budget, with the worst-case queueing delay q(b) = (b - 1) / lambda (Eq. 2).

For a DNN without successors, Eq. 5: OPT(s, t) = min over b with l_s(b) <= t of ceil(lambda_s /
h_s(b)), l = d(b) + q(b), h = b / d(b). For a declared pipeline (a chain s1 -> s2 -> ... under one
SLA), Eq. 7 / Algorithm 1: OPT(s, t) = min_b ceil(lambda_s / h_s(b)) + OPT(next, t - l_s(b)),
filled for every 1 ms budget t in reverse order and backtracked from the SLA. Ties go to the
smaller batch (the IP's small penalty delta on batch sizes, Eq. 3).

d(b) is FA2's reference latency: the profile's slowest draw (FA2 uses the 99th percentile) times
the gpu curve's batch and share factors, at the interference of a fully packed GPU of equal slices
(FA2 profiles instances in place). lambda is the last period's request rate (FA2's monitor reports
the average rate of the last period), optionally times `headroom`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from testbed.cluster.base import ServiceTarget
from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles import PACKAGED_PROFILES, ServiceProfile
from testbed.scaler.target import ClusterView

_INF = 1 << 40


@dataclass(frozen=True)
class Pipeline:
    """A chain of services that one request passes through, with one end-to-end SLA."""

    services: tuple[str, ...]
    sla_ms: float


def require_curves(
    profiles: Mapping[str, ServiceProfile], policy: str, source: str = PACKAGED_PROFILES
) -> None:
    """A policy that needs batch/share curves: one error naming the profile file and field.

    profiles: the services' profiles; policy: the policy that needs them; source: the profile file the
    error names."""
    missing = [name for name, p in profiles.items() if p.gpu is None]
    if missing:
        raise ConfigError(
            [ConfigProblem(source, None, f"services.{name}.gpu",
                           f"the {policy} policy needs the profile's gpu curve (batch/share times)")
             for name in missing]
        )


class Fa2Policy:
    """FA2's optimizer as a target policy: per service (or pipeline) the fewest instances, then the
    smallest batch, meeting the SLA under the worst-case model."""

    name = "fa2"

    def __init__(
        self,
        profiles: Mapping[str, ServiceProfile],
        *,
        share_pct: float | None = None,
        pipelines: Sequence[Pipeline] = (),
        headroom: float = 1.0,
        max_batch: int | None = None,
        profile_source: str = PACKAGED_PROFILES,
    ):
        require_curves(profiles, self.name, profile_source)
        self.profiles = dict(profiles)
        self.share = {
            s: (share_pct if share_pct is not None else p.gpu.ref_share_pct)  # type: ignore[union-attr]
            for s, p in profiles.items()
        }
        self.pipelines = list(pipelines)
        self.headroom = headroom
        self.max_batch = max_batch
        for pipe in self.pipelines:
            unknown = [s for s in pipe.services if s not in self.profiles]
            if unknown:
                raise ConfigError(
                    [ConfigProblem("<policy>", None, "pipeline",
                                   f"unknown services {', '.join(unknown)}; "
                                   f"known: {', '.join(self.profiles)}")]
                )

    def latency_ms(self, service: str, batch: int) -> float:
        """FA2's d(b): tail time of a batch at the policy's share, in a fully packed GPU.

        service: the service; batch: the batch size b."""
        prof = self.profiles[service]
        g = prof.gpu
        share = self.share[service]
        neighbours = max(0, int(100 // share) - 1)
        stretch = g.stretch([g.pressure(share)] * neighbours)  # type: ignore[union-attr]
        return prof.time_ms(batch, share, stretch, tail=True)

    def plan(self, view: ClusterView) -> dict[str, ServiceTarget]:
        """Algorithm 1 on each pipeline at its current request rates: each service's instances and batch,
        at the policy's share. view: the cluster's."""
        rates = {
            s: max(v.window.request_rate * self.headroom, 1e-6)
            for s, v in view.services.items() if s in self.profiles
        }
        out: dict[str, ServiceTarget] = {}
        in_pipe = set()
        for pipe in self.pipelines:
            chain = [s for s in pipe.services if s in rates]
            if chain:
                for s, (n, b) in zip(chain, self.solve(chain, rates, pipe.sla_ms), strict=True):
                    out[s] = ServiceTarget(n, self.share[s], b)
                in_pipe.update(chain)
        for s, lam in rates.items():
            if s not in in_pipe:
                ((n, b),) = self.solve([s], {s: lam}, self.profiles[s].slo_ms)
                out[s] = ServiceTarget(n, self.share[s], b)
        return out

    def solve(self, chain: Sequence[str], rates: Mapping[str, float], sla_ms: float) -> list[tuple[int, int]]:
        """Algorithm 1 on a chain: (instances, batch) per service minimising total instances.

        chain: the services in order; rates: each one's request rate; sla_ms: the chain's end-to-end
        SLA."""
        t_max = int(sla_ms)
        nxt = np.zeros(t_max + 1, dtype=np.int64)  # OPT of the (empty) rest of the chain
        tables = []
        for s in reversed(chain):
            lam = rates[s]
            dp = np.full(t_max + 1, _INF, dtype=np.int64)
            arg_b = np.zeros(t_max + 1, dtype=np.int64)
            arg_l = np.zeros(t_max + 1, dtype=np.int64)
            for b in range(1, self._max_batch(s) + 1):
                d = self.latency_ms(s, b)
                lat = math.ceil(d + 1000.0 * (b - 1) / lam)
                if lat > t_max:
                    break  # l(b) grows with b
                n = max(1, math.ceil(lam / (b / (d / 1000.0)) - 1e-9))
                cand = n + nxt[: t_max + 1 - lat]
                better = cand < dp[lat:]
                dp[lat:][better] = cand[better]
                arg_b[lat:][better] = b
                arg_l[lat:][better] = lat
            tables.append((dp, arg_b, arg_l))
            nxt = np.minimum(dp, _INF)
        tables.reverse()
        out, t = [], t_max
        for s, (dp, arg_b, arg_l) in zip(chain, tables, strict=True):
            if dp[t] >= _INF:
                # no batch meets the budget: FA2 has no answer; the fastest configuration is the
                # closest (batch 1, enough instances for the rate)
                d = self.latency_ms(s, 1)
                out.append((max(1, math.ceil(rates[s] * d / 1000.0)), 1))
                t = max(0, t - math.ceil(d))
                continue
            b = int(arg_b[t])
            d = self.latency_ms(s, b)
            out.append((max(1, math.ceil(rates[s] / (b / (d / 1000.0)) - 1e-9)), b))
            t -= int(arg_l[t])
        return out

    def _max_batch(self, service: str) -> int:
        top = self.profiles[service].gpu.max_batch  # type: ignore[union-attr]
        return min(top, self.max_batch) if self.max_batch else top
