"""Every policy on the GPU simulator, on the same traces: `testbed sim compare`.

Each policy runs through `ScalerLoop.decide_all` on a `GpuSimCluster` (the batched path, with
interference unless turned off), all services sharing the GPUs. The figures per policy: mean
per-period SLO violation rate, GPU share held (in DRAFAS units of 25 %), requests served within
the SLO per second, Eq. 3.2's reward with share units in place of instances (the same number for
DRAFAS's 25 % slices), decision time per step, and the share bound (`oracle.share_bound`).
With declared pipelines the simulator routes each chain (`GpuSimCluster(chains=...)`) and the row
adds per chain its end-to-end latency, violation rate (late or dropped anywhere) and requests
completed within the chain's SLA.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed.cluster.base import ServiceTarget
from testbed.errors import ConfigError, ConfigProblem
from testbed.load.trace import Trace
from testbed.profiles import ServiceProfile
from testbed.profiles.paper import REWARD_ALPHA, REWARD_BETA, SERVICES
from testbed.scaler.fa2 import Fa2Policy, Pipeline
from testbed.scaler.loop import ScalerLoop
from testbed.scaler.policies import make_policy
from testbed.sim.gpu import UNIT_PCT, GpuSimCluster
from testbed.train.oracle import share_bound

CLASSIC = ("rule_v1", "rule_v2", "static", "hpa", "ppo")
SHARE_POLICIES = ("fa2", "gslice", "inss", "ddpg")
ALL_POLICIES = ("rule_v1", "rule_v2", "static", "hpa", "ppo", "fa2", "gslice", "inss", "ddpg")


@dataclass
class PolicyResult:
    """One policy at one load: the comparison's row, and the share held at every step."""

    policy: str
    load: str
    steps: int
    slo_violation_rate: float  # mean over services of the per-period mean
    share_units: float  # mean over steps of the share held by all services, in 25 % units
    throughput: float  # requests served within the SLO per second, all services
    reward: float  # mean over services of the mean per-period reward
    decide_ms: float  # mean time the policy took per step, all services
    bound: float  # mean over services of the share bound's reward
    run_seconds: float
    per_service: dict[str, dict[str, float]] = field(default_factory=dict)
    chains: list[dict] = field(default_factory=list)  # GpuSimCluster.chain_results, + on_time_rps
    share_series: list[float] = field(default_factory=list)  # share units held, per step

    def as_json(self, with_series: bool = False) -> dict:
        d = asdict(self)
        if not with_series:
            d.pop("share_series")
        return d


def build_policies(
    name: str,
    services: Sequence[str],
    profiles: Mapping[str, ServiceProfile],
    *,
    total_units: int,
    models: Path | None,
    seed: int = 0,
    pipelines: Sequence[Pipeline] = (),
    profile_source: str = "testbed/profiles/services.yaml",
    plan_chain: bool = True,
) -> dict:
    """One policy object per service (shared by all services for the target policies).
    `plan_chain=False`: fa2 plans every service alone under its own SLO, pipelines or not."""
    if name in ("rule_v1", "rule_v2", "static", "hpa"):
        return {s: make_policy(name, s, total_units=total_units, seed=seed) for s in services}
    if name == "ppo":
        files = {s: (models / f"{s}.zip") if models else None for s in services}
        missing = [str(f) for f in files.values() if f is None or not f.exists()]
        if missing:
            raise ConfigError([ConfigProblem(m, None, "", "no Maskable PPO model here") for m in missing])
        return {s: make_policy("ppo", s, total_units=total_units, model=str(files[s])) for s in services}
    if name == "fa2":
        chosen = {s: profiles[s] for s in services}
        pol = Fa2Policy(chosen, pipelines=pipelines if plan_chain else (),
                        profile_source=profile_source)
        return dict.fromkeys(services, pol)
    if name == "gslice":
        from testbed.scaler.gslice import EqualSharePolicy

        pol = EqualSharePolicy({s: profiles[s] for s in services}, profile_source=profile_source)
        return dict.fromkeys(services, pol)
    if name in ("ddpg", "inss"):
        from testbed.scaler.share import SharePolicy

        path = (models / f"{name}.zip") if models else None
        if path is None or not path.exists():
            raise ConfigError([ConfigProblem(
                str(path or f"models/{name}.zip"), None, "",
                f"no {name} model here; train one with `testbed train --policy {name}`")])
        pol = SharePolicy.load(path, {s: profiles[s] for s in services}, profile_source=profile_source)
        return dict.fromkeys(services, pol)
    raise ConfigError(
        [ConfigProblem("--policies", None, "policies",
                       f"unknown policy {name!r}; known: {', '.join(ALL_POLICIES)}")]
    )


def run_policy(
    name: str,
    policies: Mapping,
    profiles: Mapping[str, ServiceProfile],
    traces: Mapping[str, Trace],
    ratios: Mapping[str, float],
    *,
    gpus: int,
    load: str = "",
    seed: int = 0,
    interference: bool = True,
    max_steps: int | None = None,
    bounds: Mapping[str, float] | None = None,
    initial: Mapping[str, ServiceTarget] | None = None,
    progress: Callable[[int, int], None] | None = None,
    pipelines: Sequence[Pipeline] = (),
) -> PolicyResult:
    """Run one policy over the traces; `pipelines` are routed (a later stage ignores its trace)."""
    services = list(policies)
    cluster = GpuSimCluster(
        {s: profiles[s] for s in services},
        {s: traces[s] for s in services if s in traces},
        {s: ratios[s] for s in services if s in ratios},
        gpus=gpus,
        seed=seed,
        interference=interference,
        initial=initial,
        chains=pipelines,
    )
    total_units = cluster.total_units()
    loop = ScalerLoop(cluster, policies, cluster.latest_window, clock=lambda: cluster.now)
    total_steps = int(min(traces[s].seconds for s in services if s in traces) // cluster.step_seconds)
    if max_steps is not None:
        total_steps = min(total_steps, max_steps)
    acc = {s: {"slo": 0.0, "reward": 0.0, "share": 0.0, "on_time": 0.0} for s in services}
    series: list[float] = []
    decide_ms = 0.0
    started = time.perf_counter()
    steps = 0
    while steps < total_steps and not cluster.done:
        cluster.advance()
        held = {s: cluster.share_used_pct(s) / UNIT_PCT for s in services}
        series.append(sum(held.values()))
        seen_groups: set[int] = set()
        for d in loop.decide_all():
            group = id(policies[d.service])
            if d.target is None or group not in seen_groups:
                decide_ms += d.decide_ms
                seen_groups.add(group)
            out = cluster.last_outcome[d.service]
            a = acc[d.service]
            slo = d.slo_violation_rate
            a["slo"] += slo
            a["share"] += held[d.service]
            a["reward"] += -(REWARD_ALPHA * slo + REWARD_BETA * held[d.service] / total_units)
            a["on_time"] += out.on_time
        steps += 1
        if progress is not None and steps % 96 == 0:
            progress(steps, total_steps)
    n = max(steps, 1)
    seconds = n * cluster.step_seconds
    per = {
        s: {"slo_violation_rate": a["slo"] / n, "share_units": a["share"] / n,
            "throughput": a["on_time"] / seconds, "reward": a["reward"] / n,
            **({"bound": bounds[s]} if bounds else {})}
        for s, a in acc.items()
    }
    k = len(services)
    chains = [{**c, "on_time_rps": c["on_time"] / seconds} for c in cluster.chain_results()]
    return PolicyResult(
        policy=name,
        load=load,
        steps=steps,
        slo_violation_rate=sum(p["slo_violation_rate"] for p in per.values()) / k,
        share_units=sum(series) / n,
        throughput=sum(p["throughput"] for p in per.values()),
        reward=sum(p["reward"] for p in per.values()) / k,
        decide_ms=decide_ms / n,
        bound=sum(bounds.values()) / k if bounds else float("nan"),
        run_seconds=time.perf_counter() - started,
        per_service=per,
        chains=chains,
        share_series=series,
    )


def bounds_for(
    profiles: Mapping[str, ServiceProfile],
    traces: Mapping[str, Trace],
    ratios: Mapping[str, float],
    *,
    gpus: int,
    max_steps: int | None = None,
    seed: int = 0,
    services: Sequence[str] | None = None,
    pipelines: Sequence[Pipeline] = (),
) -> dict[str, float]:
    """The share bound per service, on the request sizes `run_policy` draws for `services` (in
    that order, as the policies' mapping has them) and `seed`. A later stage of a pipeline gets
    NaN: its load is the stage before's completions, not a trace the bound could read."""
    names = list(services or profiles)
    routed = {s for p in pipelines for s in p.services[1:]}
    total_units = int(gpus * 100 / UNIT_PCT)
    # the same streams as run_policy's cluster: build it for its draws (its GPUs do not matter)
    draws = GpuSimCluster({s: profiles[s] for s in names}, {s: traces[s] for s in names},
                          {s: ratios[s] for s in names}, gpus=len(names), seed=seed, interference=False)
    return {
        s: share_bound(profiles[s], traces[s], ratios[s], total_units=total_units, steps=max_steps,
                       proc_s=draws.sims[s].proc_s).reward
        if s not in routed else float("nan")
        for s in names
    }


def default_services() -> list[str]:
    return list(SERVICES)
