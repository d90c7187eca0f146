"""What the metrics' PromQL shares: how a service appears in the mesh's series, durations, and
the label of a histogram bucket at a threshold."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PromService:
    """How one service appears in the lab's metrics.

    `slo_ms` must be one of the boundaries of the duration histogram; `capacity` is the number of
    requests one replica processes in parallel (the dissertation's `capacity`).
    """

    name: str
    slo_ms: float
    capacity: int = 1
    namespace: str = "drafas"
    app: str | None = None  # pod label `app`; defaults to the service name

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"{self.name}: capacity must be at least 1, got {self.capacity}")
        if self.slo_ms <= 0:
            raise ValueError(f"{self.name}: slo_ms must be positive, got {self.slo_ms}")


def le_regex(value: float) -> str:
    """A regex for a bucket's `le` label: Envoy writes "1000", Prometheus 3 normalises to "1000.0"."""
    text = f"{value:g}" if value != int(value) else str(int(value))
    return text.replace(".", "\\\\.") + "(\\\\.0)?"


def duration(seconds: float) -> str:
    """`seconds` as a PromQL duration, in whole milliseconds (at least 1)."""
    return f"{max(round(seconds * 1000), 1)}ms"
