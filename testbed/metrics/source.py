"""Where the runner's window counts come from: `MetricsSource`, and the local profile's source.

The scaler needs one `WindowMetrics` per service per period; the per-second samples need
cumulative arrivals and violations. The local profile reads them from its in-process load
balancer (`BalancerMetrics`), the lab from Istio/Envoy metrics in Prometheus
(`testbed.metrics.prometheus.PrometheusMetrics`).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from testbed.metrics.window import WindowMetrics


@runtime_checkable
class MetricsSource(Protocol):
    def windows(self, seconds: float) -> dict[str, WindowMetrics]:
        """Every service's last `seconds` (scenario seconds)."""
        ...

    def totals(self, service: str) -> tuple[int, int]:
        """Cumulative (arrivals, SLO violations) since the source started."""
        ...


class BalancerMetrics:
    """The local load balancer's collectors as a `MetricsSource`."""

    def __init__(self, lb: Any):
        self.lb = lb

    def windows(self, seconds: float) -> dict[str, WindowMetrics]:
        return self.lb.window(seconds)

    def totals(self, service: str) -> tuple[int, int]:
        coll = self.lb.services[service].collector
        return coll.total_arrivals, coll.total_violations
