"""The series the lab's service mesh exports to Prometheus, in the same names, labels and buckets,
for whatever stands where Istio's sidecar stands (the local load balancer, the lab's busy meter).

- `istio_requests_total{reporter="destination", destination_workload_namespace,
  destination_service_name, response_code, namespace, pod, app}`: one count per finished request;
- `istio_request_duration_milliseconds_{bucket,sum,count}` with the same labels, Istio's default
  buckets plus one at each service's SLO threshold;
- `envoy_cluster_upstream_rq_active{cluster_name="inbound|<port>||", namespace, pod, app}`: the
  requests in flight to one replica;
- `envoy_http_downstream_rq_active{http_conn_manager_prefix="inbound_0.0.0.0_<port>", namespace,
  pod, app}`: the same requests as the sidecar's inbound listener counts them, the gauge the
  DRAFAS testbed read its utilization from (`measure: drafas`, tu-nv/drafas drl/env.py:157);
- `testbed_replica_busy_seconds_total{namespace, pod, app}`: the integral over time of
  min(in_flight, capacity) / capacity, so its increase over a scrape interval divided by the
  interval is that replica's utilization there without sampling the in-flight gauge (a
  once-a-second reading aliases with evenly spaced requests). Exported for the replicas in
  rotation (ready) only, so that the query's per-step count of these series is the ready count
  (docs/metrics.md); a replica taken out keeps its in-flight series until it has drained.

On the lab, `namespace`, `pod` and `app` come from Prometheus's pod relabelling; here they are
written by the exporter so that one set of queries (`testbed.metrics.prometheus`) reads both.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from testbed.metrics.meter import BUSY, BusyMeter

REQUESTS = "istio_requests_total"
DURATION_MS = "istio_request_duration_milliseconds"
IN_FLIGHT = "envoy_cluster_upstream_rq_active"
DOWNSTREAM_IN_FLIGHT = "envoy_http_downstream_rq_active"

# Istio's default buckets of istio_request_duration_milliseconds (ms)
ISTIO_BUCKETS_MS = (0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
                    300000, 600000, 1800000, 3600000)

_REQUEST_LABELS = ("reporter", "destination_workload_namespace", "destination_service_name",
                   "response_code", "namespace", "pod", "app")


def duration_buckets_ms(slo_ms: list[float]) -> tuple[float, ...]:
    """Istio's buckets plus one at each SLO, so `le="<slo>"` counts the requests within it."""
    return tuple(sorted(set(ISTIO_BUCKETS_MS) | {round(s, 3) for s in slo_ms}))


@dataclass(frozen=True)
class Workload:
    """Where a replica's series say they come from (the labels the lab's relabelling adds)."""

    service: str
    namespace: str
    port: int = 80  # the inbound cluster's port: `inbound|<port>||`


class MeshMetrics:
    """The mesh-shaped series of any number of replicas, in their own registry."""

    def __init__(self, slo_ms: list[float], registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry(auto_describe=True)
        # prometheus-client appends _total to counters itself
        self._requests = Counter(REQUESTS.removesuffix("_total"), "Requests finished (mesh-shaped)",
                                 _REQUEST_LABELS, registry=self.registry)
        self._duration = Histogram(DURATION_MS, "Request duration in ms (mesh-shaped)",
                                   _REQUEST_LABELS, buckets=duration_buckets_ms(slo_ms),
                                   registry=self.registry)
        self._replicas: dict[tuple[str, str], tuple[Workload, BusyMeter]] = {}
        # each (service, pod, code)'s labelled children, looked up once: labels() takes a lock and
        # builds its key on every call, a tenth of the balancer's bookkeeping per request
        self._finished: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._unready: set[tuple[str, str]] = set()  # taken out of rotation, still draining
        self.registry.register(_ReplicaCollector(self))

    def replica(self, workload: Workload, pod: str, capacity: int) -> BusyMeter:
        """The meter of replica `pod` (created on first use; its series appear from then on)."""
        key = (workload.service, pod)
        if key not in self._replicas:
            self._replicas[key] = (workload, BusyMeter(capacity))
        return self._replicas[key][1]

    def unready(self, service: str, pod: str) -> None:
        """The replica left the rotation: its busy series disappears (it no longer counts among
        the ready replicas), its in-flight series stays until `forget`."""
        if (service, pod) in self._replicas:
            self._unready.add((service, pod))

    def forget(self, service: str, pod: str) -> None:
        """The replica is gone: its series disappear, as a deleted pod's do."""
        self._replicas.pop((service, pod), None)
        self._unready.discard((service, pod))

    def is_ready(self, service: str, pod: str) -> bool:
        return (service, pod) in self._replicas and (service, pod) not in self._unready

    def finished(self, workload: Workload, pod: str, code: int, duration_ms: float) -> None:
        key = (workload.service, pod, code)
        children = self._finished.get(key)
        if children is None:
            labels = ("destination", workload.namespace, workload.service, str(code),
                      workload.namespace, pod, workload.service)
            children = self._finished[key] = (self._requests.labels(*labels),
                                              self._duration.labels(*labels))
        children[0].inc()
        children[1].observe(duration_ms)

    def replicas(self) -> Iterator[tuple[Workload, str, BusyMeter]]:
        for (_, pod), (workload, meter) in list(self._replicas.items()):
            yield workload, pod, meter


class _ReplicaCollector(Collector):
    """In-flight and busy seconds read at scrape time, so the counter is exact to the scrape."""

    def __init__(self, mesh: MeshMetrics):
        self.mesh = mesh

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        active = GaugeMetricFamily(IN_FLIGHT, "Requests in flight to one replica",
                                   labels=["cluster_name", "namespace", "pod", "app"])
        downstream = GaugeMetricFamily(DOWNSTREAM_IN_FLIGHT, "Requests in flight at one replica's "
                                       "inbound listener", labels=["http_conn_manager_prefix",
                                                                   "namespace", "pod", "app"])
        busy = CounterMetricFamily(BUSY.removesuffix("_total"), "Seconds of min(in_flight, "
                                   "capacity)/capacity of one replica", labels=["namespace", "pod", "app"])
        for workload, pod, meter in self.mesh.replicas():
            active.add_metric([f"inbound|{workload.port}||", workload.namespace, pod, workload.service],
                              meter.in_flight)
            downstream.add_metric([f"inbound_0.0.0.0_{workload.port}", workload.namespace, pod,
                                   workload.service], meter.in_flight)
            if self.mesh.is_ready(workload.service, pod):
                busy.add_metric([workload.namespace, pod, workload.service], meter.busy_seconds())
        yield active
        yield downstream
        yield busy
