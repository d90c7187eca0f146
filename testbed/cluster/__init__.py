"""Where service replicas run: local processes or Kubernetes Deployments, behind one protocol."""

from testbed.cluster.base import ClusterBackend

__all__ = ["ClusterBackend"]
