"""The fast simulator of services and trace-replaying clients (dissertation Section 3.4)."""

from testbed.sim.cluster import SimCluster, SimOptions
from testbed.sim.service import SimService, StepOutcome

__all__ = [
    "SimCluster",
    "SimOptions",
    "SimService",
    "StepOutcome",
]
