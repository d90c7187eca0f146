"""A scaler period read from Prometheus as the DRAFAS testbed read it (`measure: drafas`), in the
mesh's names: the queries of tu-nv/drafas `drl/env.py` `get_stats` (lines 139-157).

Per service S with SLO T and capacity C, over the window w at its end:

- request rate: `sum(increase(istio_requests_total[w])) / w` (Prometheus extrapolates `increase`
  to the window's edges);
- SLO violation rate: `1 - sum(increase(..._bucket{response_code="200", le="T"}[w])) /
  sum(increase(..._bucket{le="+Inf"}[w]))`: a failure, of any code, counts as a violation;
- mean latency: `_sum / _count` of the histogram over the 200s only;
- utilization: `sum(avg_over_time(clamp_max(envoy_http_downstream_rq_active, C)[w:step])) / N`,
  each pod's in-flight gauge as Prometheus scraped it at the subquery's steps (the scrape
  interval), clamped at capacity, averaged, summed over pods and divided by N (here also by C,
  so that it reads as the harness's share of capacity: C is 1 for the paper's services);
- N: the pods of S in phase Running at the query, starting ones and deleted ones not yet gone
  included (env.py:129-133), from the cluster (`running`), not from a series.

A query that finds nothing, or NaN, reads 0 (env.py:111-117), so a window without a request
served reads a violation rate of 0, as the author's did.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.clock import ScenarioClock
from testbed.metrics.mesh import DOWNSTREAM_IN_FLIGHT
from testbed.metrics.promql import PromService, duration, le_regex
from testbed.metrics.window import WindowMetrics


@dataclass(frozen=True)
class DrafasQueries:
    """The PromQL of one service's window, the DRAFAS way."""

    requests: str
    within_slo: str
    every: str
    latency_sum_ms: str
    latency_count: str
    in_flight: str  # sum over pods of the time mean of min(in_flight, capacity) at each step

    @classmethod
    def build(cls, svc: PromService, wall_s: float, step_s: float) -> DrafasQueries:
        """The queries over `wall_s` wall seconds, the gauge read each `step_s` (the scrape
        interval)."""
        w, step = duration(wall_s), duration(step_s)
        req = (f'reporter="destination",destination_workload_namespace="{svc.namespace}",'
               f'destination_service_name="{svc.name}"')
        ok = f'{req},response_code="200"'
        pod = f'namespace="{svc.namespace}",app="{svc.app or svc.name}"'
        gauge = f'{DOWNSTREAM_IN_FLIGHT}{{{pod},http_conn_manager_prefix=~"inbound_.*"}}'
        histogram = "istio_request_duration_milliseconds"
        return cls(
            requests=f"sum(increase(istio_requests_total{{{req}}}[{w}]))",
            within_slo=f'sum(increase({histogram}_bucket{{{ok},le=~"{le_regex(svc.slo_ms)}"}}[{w}]))',
            every=f'sum(increase({histogram}_bucket{{{req},le="+Inf"}}[{w}]))',
            latency_sum_ms=f"sum(increase({histogram}_sum{{{ok}}}[{w}]))",
            latency_count=f"sum(increase({histogram}_count{{{ok}}}[{w}]))",
            in_flight=f"sum(avg_over_time(clamp_max({gauge}, {svc.capacity})[{w}:{step}]))",
        )

    def items(self) -> list[tuple[str, str]]:
        return list(self.__dict__.items())


def drafas_window(service: str, seconds: float, values: dict[str, float | None], *,
                  pods: int, capacity: int, clock: ScenarioClock) -> WindowMetrics:
    """The WindowMetrics the DRAFAS reading makes of one window's answers (`values`, by
    DrafasQueries' names; None where Prometheus found nothing or NaN): counts whose ratios are
    its rates (violations / completed is its violation rate).

    service: its name; seconds: the window (scenario s); pods: N, the Running pods at the
    query; capacity: a replica's; clock: the run's (latencies come back in scenario ms)."""
    v = {k: (x if x is not None else 0.0) for k, x in values.items()}  # nothing reads 0
    every = v["every"]
    rate = 0.0
    if values["within_slo"] is not None and every > 0:
        rate = min(max(1.0 - v["within_slo"] / every, 0.0), 1.0)
    completed = round(every)
    utilization = v["in_flight"] / capacity / pods if pods > 0 else 0.0
    count = v["latency_count"]
    return WindowMetrics(
        service=service,
        seconds=float(seconds),
        arrivals=round(v["requests"]),
        completed=completed,
        violations=round(rate * completed),
        utilization=min(max(utilization, 0.0), 1.0),
        instances=pods,
        mean_latency_ms=clock.scenario(v["latency_sum_ms"] / count) if count > 0 else None,
    )
