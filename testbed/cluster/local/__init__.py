"""The local cluster: replica processes of the emulated services on this machine, behind one load
balancer, configured by one LocalClusterConfig (cluster.py composes the parts: supervisor,
launch, placement, interference, rotation, events, client; admin.py is its control API)."""

from testbed.cluster.local.cluster import LocalCluster
from testbed.cluster.local.config import LocalClusterConfig
from testbed.cluster.local.events import ClusterEvent

__all__ = ["ClusterEvent", "LocalCluster", "LocalClusterConfig"]
