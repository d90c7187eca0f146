"""Whether two metrics sources saw the same cell: the in-process load balancer and Prometheus.

The tolerances are the ones a run with `--metrics prometheus` is held to on each cell (the
Prometheus side reads counters at its scrapes, the balancer at the instant it is asked).
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.metrics.window import WindowMetrics

COUNT_REL = 0.02  # completed requests and SLO violations
LATENCY_REL = 0.05  # mean latency
UTILIZATION_ABS = 0.05  # instance utilization


@dataclass(frozen=True)
class Agreement:
    service: str
    in_process: WindowMetrics
    prometheus: WindowMetrics
    misses: tuple[str, ...]  # what differs beyond its tolerance, in words

    @property
    def agrees(self) -> bool:
        return not self.misses

    def row(self) -> dict[str, object]:
        def side(w: WindowMetrics) -> dict[str, object]:
            return {"completed": w.completed, "violations": w.violations,
                    "mean_latency_ms": w.mean_latency_ms, "utilization": round(w.utilization, 4)}
        return {"service": self.service, "in_process": side(self.in_process),
                "prometheus": side(self.prometheus), "agrees": self.agrees, "misses": list(self.misses)}

    def line(self) -> str:
        a, b = self.in_process, self.prometheus

        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f}"
        verdict = "agree" if self.agrees else "DISAGREE: " + "; ".join(self.misses)
        return (f"{self.service}: in-process / prometheus: completed {a.completed} / {b.completed}, "
                f"violations {a.violations} / {b.violations}, mean ms {ms(a.mean_latency_ms)} / "
                f"{ms(b.mean_latency_ms)}, utilization {a.utilization:.3f} / {b.utilization:.3f}: "
                f"{verdict}")


def _rel_off(a: float, b: float, rel: float, floor: float = 1.0) -> bool:
    """Off by more than `rel` of the larger, and by more than `floor` (one request of a handful)."""
    return abs(a - b) > max(rel * max(abs(a), abs(b)), floor)


def compare(in_process: WindowMetrics, prometheus: WindowMetrics) -> Agreement:
    """Each figure of the two sources against its bound; a miss reads "<metric> <in-process>
    in-process vs <prometheus> prometheus (bound <bound>)"."""
    misses = []
    a, b = in_process, prometheus

    def miss(metric: str, x: object, y: object, bound: str) -> None:
        misses.append(f"{metric} {x} in-process vs {y} prometheus (bound {bound})")
    if _rel_off(a.completed, b.completed, COUNT_REL):
        miss("completed", a.completed, b.completed, f"{COUNT_REL:.0%}, at least 1")
    if _rel_off(a.violations, b.violations, COUNT_REL):
        miss("violations", a.violations, b.violations, f"{COUNT_REL:.0%}, at least 1")
    if (a.mean_latency_ms is None) != (b.mean_latency_ms is None):
        def ms(v: float | None) -> str:
            return "none" if v is None else f"{v:.1f} ms"
        miss("mean latency", ms(a.mean_latency_ms), ms(b.mean_latency_ms),
             "both or neither have completions")
    elif a.mean_latency_ms is not None and b.mean_latency_ms is not None and _rel_off(
            a.mean_latency_ms, b.mean_latency_ms, LATENCY_REL, floor=0.0):
        miss("mean latency", f"{a.mean_latency_ms:.1f} ms", f"{b.mean_latency_ms:.1f} ms",
             f"{LATENCY_REL:.0%}")
    if abs(a.utilization - b.utilization) > UTILIZATION_ABS:
        miss("utilization", f"{a.utilization:.3f}", f"{b.utilization:.3f}", f"±{UTILIZATION_ABS}")
    return Agreement(a.service, a, b, tuple(misses))
