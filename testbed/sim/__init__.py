"""The fast simulator of services and trace-replaying clients (dissertation Section 3.4)."""

from testbed.sim.cluster import SimCluster, SimOptions
from testbed.sim.paper import PROFILES, ServiceProfile
from testbed.sim.service import SimService, StepOutcome
from testbed.sim.trace import Trace, arrival_times, read_trace

__all__ = [
    "PROFILES",
    "ServiceProfile",
    "SimCluster",
    "SimOptions",
    "SimService",
    "StepOutcome",
    "Trace",
    "arrival_times",
    "read_trace",
]
