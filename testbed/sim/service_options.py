"""How a simulated service reads its windows, and which of a testbed's effects it models: the
settings SimService takes beside its profile and arrivals (testbed.sim.cluster's SimOptions
holds the run's)."""

from __future__ import annotations

from dataclasses import dataclass

from testbed.sim.measure import Measurement


@dataclass(frozen=True)
class WindowReading:
    """How the simulator reads a window: `slo_counting` (see SimService), whether the utilization
    counts starting instances (`util_counts_starting`, see testbed.sim.window_stats.mean_utilization),
    and `util_sample_phase`, the s after each whole second its monitor samples."""

    util_counts_starting: bool = True
    slo_counting: str = "completion"
    util_sample_phase: float = 0.0


@dataclass(frozen=True)
class TestbedEffects:
    """A testbed's effects the simulator can model: its `measurement` of each period (None: the
    simulator's own reading), `balancing` ("round-robin" or "random", kube-proxy's choice per
    connection), and processing times `stretched` by each replica's interference factor."""

    __test__ = False  # not a pytest test class, whatever its name
    measurement: Measurement | None = None
    balancing: str = "round-robin"
    stretched: bool = False
