"""The Prometheus metrics the local load balancer exposes on /metrics; the lab profile's
Prometheus backend queries the same names."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REQUESTS = "testbed_requests_total"  # {service, code}
DURATION = "testbed_request_duration_seconds"  # {service}, histogram with a bucket at each SLO
VIOLATIONS = "testbed_slo_violations_total"  # {service, reason}
IN_FLIGHT = "testbed_replica_in_flight"  # {service, replica}
READY = "testbed_replicas_ready"  # {service}
CAPACITY = "testbed_replica_capacity"  # {service}
UTILIZATION = "testbed_instance_utilization"  # {service}, last per-interval sample
LOST = "testbed_client_connections_lost_total"  # {service}: clients gone before their response

_BASE_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 4.0, 5.0, 10.0, 30.0)


def duration_buckets(slo_seconds: list[float]) -> tuple[float, ...]:
    """Standard buckets plus one at every service's SLO threshold, so `le="<slo>"` counts the
    requests that met the SLO exactly."""
    return tuple(sorted(set(_BASE_BUCKETS) | {round(s, 6) for s in slo_seconds}))


class BalancerMetrics:
    """prometheus-client objects in their own registry (two balancers in one process never clash)."""

    def __init__(self, slo_seconds: list[float]):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # prometheus-client appends _total to counters itself.
        self.requests = Counter(REQUESTS.removesuffix("_total"), "Requests finished at the load balancer",
                                ["service", "code"], registry=r)
        self.duration = Histogram(DURATION, "Request duration at the load balancer", ["service"],
                                  buckets=duration_buckets(slo_seconds), registry=r)
        self.violations = Counter(VIOLATIONS.removesuffix("_total"), "Requests that violated the SLO",
                                  ["service", "reason"], registry=r)
        self.in_flight = Gauge(IN_FLIGHT, "Requests in flight to one replica (its proxy's count)",
                               ["service", "replica"], registry=r)
        self.ready = Gauge(READY, "Replicas in rotation", ["service"], registry=r)
        self.capacity = Gauge(CAPACITY, "Requests one replica processes at once (profile)", ["service"],
                              registry=r)
        self.utilization = Gauge(UTILIZATION, "Instance utilization of the last sampling interval",
                                 ["service"], registry=r)
        self.lost = Counter(LOST.removesuffix("_total"), "Client connections lost before the "
                            "response was sent", ["service"], registry=r)
