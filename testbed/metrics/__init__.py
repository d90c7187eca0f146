"""Per-replica in-flight sampling, request rate, SLO violations; Prometheus on the lab profile."""

from testbed.metrics.window import WindowMetrics

__all__ = ["WindowMetrics"]
