"""The fast simulator of services and trace-replaying clients (dissertation Section 3.4)."""

from testbed.sim.cluster import SimCluster, SimOptions
from testbed.sim.paper import PROFILES, ServiceProfile
from testbed.sim.service import SimService, StepOutcome

__all__ = [
    "PROFILES",
    "ServiceProfile",
    "SimCluster",
    "SimOptions",
    "SimService",
    "StepOutcome",
]
