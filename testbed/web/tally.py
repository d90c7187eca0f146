"""The live tally's rows: each service's figures over its measured requests so far, by the same
definitions as `testbed.scenario.results.service_row` (what a cell's results record once it ends)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from testbed.clock import ScenarioClock
from testbed.load.stats import percentile
from testbed.scenario.results import late_beyond_bound
from testbed.web.bins import Tally


def tally_rows(tally: dict[str, Tally], clock: ScenarioClock, slo_ms: Callable[[str], float]
               ) -> dict[str, dict[str, Any]]:
    """Per service of `tally`, its row so far; `clock`: the cell's (at a time scale, how late its
    clients are beyond the bound of `slo_ms`, the service's SLO, is a figure too)."""
    view = {}
    for service, t in tally.items():
        n = t.requests
        late = (late_beyond_bound(list(t.lags_ms), slo_ms=slo_ms(service))
                if not clock.real_time else None)
        view[service] = {
            "service": service, "requests": n, "errors": t.errors, "violations": t.violations,
            "slo_violation_rate": t.violations / n if n else None,
            "mean_latency_ms": t.latency_sum_ms / len(t.ok_ms) if t.ok_ms else None,
            "p50_latency_ms": percentile(t.ok_ms, 0.5),
            "p99_latency_ms": percentile(t.ok_ms, 0.99),
            "p99_lateness_ms": percentile(t.lags_ms, 0.99),
            "mean_replicas": t.ready_sum / t.samples if t.samples else None,
            "behind_ms": late}
    return view
