"""The fast simulator of services and trace-replaying clients (dissertation Section 3.4)."""

from testbed.sim.cluster import SimCluster
from testbed.sim.paper import PROFILES, ServiceProfile
from testbed.sim.service import SimService, StepOutcome
from testbed.sim.trace import Trace, arrival_times, read_trace

__all__ = [
    "PROFILES",
    "ServiceProfile",
    "SimCluster",
    "SimService",
    "StepOutcome",
    "Trace",
    "arrival_times",
    "read_trace",
]
