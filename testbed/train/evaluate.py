"""Run policies on the simulator through the real control loop and summarise each service."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testbed.errors import ConfigError, ConfigProblem
from testbed.load.trace import Trace, load_trace
from testbed.metrics.histogram import LatencyHistogram
from testbed.profiles import ServiceProfile, default_profiles
from testbed.profiles.paper import DEFAULT_RATIOS, TEST_SHIFT_HOURS, TOTAL_UNITS, test_day_file
from testbed.scaler.loop import Decision, ScalerLoop
from testbed.scaler.policies import Policy, policy_name
from testbed.sim.cluster import DEFAULT_OPTIONS, SimCluster, SimOptions


@dataclass(frozen=True)
class ServiceResult:
    """Table 5.1's figures for one service and policy, plus how fast the run went."""

    service: str
    policy: str
    steps: int
    slo_violation_rate: float  # mean of per-period rates
    instances: float  # mean replicas (desired, i.e. holding units) per period
    proc_time: float  # mean over periods of the period's mean latency of served requests, seconds
    reward: float  # mean Eq. 3.2 reward per period
    steps_per_second: float
    steps_per_cpu_second: float = 0.0  # steps over this process's CPU time: robust on a busy machine
    # latency percentiles of every served request (ms; a histogram's, within 0.5 %), where asked for
    p50_latency_ms: float | None = None
    p95_latency_ms: float | None = None
    p99_latency_ms: float | None = None

    def as_json(self) -> dict[str, float | int | str]:
        return asdict(self)


def default_ratio(service: str) -> float:
    """The request ratio a service's trace counts are multiplied by: the paper's for its three
    services (Section 4.4.1), 1 (the counts as they are) for any other."""
    return DEFAULT_RATIOS.get(service, 1.0)


def test_day_traces(traces_dir: str | Path, services: list[str] | None = None) -> dict[str, Trace]:
    """The test day, shifted 0/8/16 h for chatbot/imgcls/tts (Section 5.1)."""
    out = {}
    for service in services or list(TEST_SHIFT_HOURS):
        if service not in TEST_SHIFT_HOURS:
            raise ConfigError([ConfigProblem("<sim>", None, "service", f"no test trace for {service!r}")])
        out[service] = load_trace(Path(traces_dir) / test_day_file(service))
    return out


@dataclass(frozen=True)
class EvalRun:
    """How far an evaluation runs, on what, and what it reports as it goes (the simulator's own
    choices are `SimOptions`).

    `cluster`: a simulator built by the caller (e.g. a `GpuSimCluster` routing a pipeline) instead
    of the DRAFAS simulator; it serves the policies' services, the traces only bound the steps.
    `latency_percentiles`: also every served request's p50/p95/p99 (a histogram per service).
    """

    max_steps: int | None = None
    on_decision: Callable[[Decision], None] | None = None
    progress: Callable[[int, int], None] | None = None
    cluster: Any = None
    latency_percentiles: bool = False


DEFAULT_RUN = EvalRun()


def evaluate(
    policies: Mapping[str, Policy],
    traces: Mapping[str, Trace],
    ratios: Mapping[str, float],
    *,
    total_units: int = TOTAL_UNITS,
    seed: int = 0,
    profiles: Mapping[str, ServiceProfile] | None = None,
    options: SimOptions = DEFAULT_OPTIONS,
    run: EvalRun = DEFAULT_RUN,
) -> dict[str, ServiceResult]:
    """All `policies`' services share one cluster of `total_units`, as in Section 5.1 (`run`: how
    far, on a simulator of the caller's, with what reported as it goes).

    Like the dissertation's evaluation (its EvalStats), SLO violation rate, instances and
    processing time are means over periods of the per-period values (processing time over the
    periods that served a request), and the reward is Eq. 3.2's mean per period.
    """
    chosen = {s: (profiles or default_profiles())[s] for s in policies}
    cluster = run.cluster
    if cluster is None:
        cluster = SimCluster(
            chosen,
            {s: traces[s] for s in chosen},
            {s: ratios[s] for s in chosen},
            total_units=total_units,
            seed=seed,
            options=options,
        )
    loop = ScalerLoop(cluster, policies, cluster.latest_window, clock=lambda: cluster.now,
                      profiles=chosen)
    histograms = _latency_histograms(cluster, chosen) if run.latency_percentiles else {}
    if hasattr(cluster, "measure_queue"):
        cluster.measure_queue(loop.observes)  # the queue's pass only for a policy that reads it
    total_steps = int(min(t.seconds for t in traces.values()) // cluster.step_seconds)
    if run.max_steps is not None:
        total_steps = min(total_steps, run.max_steps)
    started, cpu_started = time.perf_counter(), time.process_time()
    steps, sums = _run_steps(cluster, loop, list(chosen), total_steps, run)
    elapsed = max(time.perf_counter() - started, 1e-9)
    cpu = max(time.process_time() - cpu_started, 1e-9)
    n = max(steps, 1)
    return {
        s: ServiceResult(
            s,
            policy_name(policies[s]),
            steps,
            acc[0] / n,
            acc[1] / n,
            acc[3] / acc[4] if acc[4] else 0.0,
            acc[2] / n,
            steps / elapsed,
            steps / cpu,
            **(histograms[s].percentiles() if s in histograms else {}),
        )
        for s, acc in sums.items()
    }


def _latency_histograms(cluster: Any, chosen: Mapping[str, ServiceProfile]) -> dict[str, LatencyHistogram]:
    """A histogram fed every served request, per service whose simulator keeps latencies."""
    histograms: dict[str, LatencyHistogram] = {}
    for s in chosen:
        sim = getattr(cluster, "sims", {}).get(s)
        if sim is not None and hasattr(sim, "latencies"):
            sim.latencies = histograms[s] = LatencyHistogram()
    return histograms


def _run_steps(
    cluster: Any, loop: ScalerLoop, services: list[str], total_steps: int, run: EvalRun
) -> tuple[int, dict[str, list[float]]]:
    """The control loop over the steps: how many ran, and per service the sums of SLO violation
    rate, instances, reward and processing time, and the periods that served a request."""
    sums: dict[str, list[float]] = {s: [0.0, 0.0, 0.0, 0.0, 0] for s in services}
    on_decision, progress = run.on_decision, run.progress
    steps = 0
    # looked up once: the loop runs ~3,000 times; the period's outcomes are read from last_outcome,
    # so a simulator that can skip building the windows' dict (SimCluster.simulate) does
    advance, decide = getattr(cluster, "simulate", cluster.advance), loop.decide
    while steps < total_steps and not cluster.done:
        advance()
        outcomes = cluster.last_outcome
        for service in services:
            d = decide(service)
            out = outcomes[service]
            acc = sums[service]
            acc[0] += d.slo_violation_rate
            acc[1] += d.replicas_before
            acc[2] += d.reward
            if out.served:
                acc[3] += out.proc_time_sum_s / out.served
                acc[4] += 1
            if on_decision is not None:
                on_decision(d)
        steps += 1
        if progress is not None and steps % 96 == 0:
            progress(steps, total_steps)
    return steps, sums
