"""A GSLICE-like baseline (InSS's comparison, papers/001 Section 6.1): every GPU split into equal MPS
shares among the services, each service's batch tuned to the largest one whose tail time meets
half its SLO (GSLICE tunes batch sizes against latency; it does not model interference or scale
the share with the load). The share stays fixed: it is what InSS's throughput gain is measured
against."""

from __future__ import annotations

import math
from collections.abc import Mapping

from testbed.cluster.base import ServiceTarget
from testbed.profiles import PACKAGED_PROFILES, ServiceProfile
from testbed.scaler.fa2 import require_curves
from testbed.scaler.target import ClusterView


class EqualSharePolicy:
    """GSLICE-like baseline: every service one instance per GPU at an equal share of each, with the
    largest batch whose tail time at that share is within half its SLO."""
    name = "gslice"

    def __init__(self, profiles: Mapping[str, ServiceProfile], *, profile_source: str = ""):
        require_curves(profiles, self.name, profile_source or PACKAGED_PROFILES)
        self.profiles = dict(profiles)

    def plan(self, view: ClusterView) -> dict[str, ServiceTarget]:
        """The equal-share targets for `view`'s GPUs."""
        gpus = len(view.gpu_free_pct)
        k = len(self.profiles)
        share = math.floor(100.0 / k)
        out = {}
        for s, prof in self.profiles.items():
            g = prof.gpu
            batch = 1
            for b in range(1, g.max_batch + 1):  # type: ignore[union-attr]
                if prof.time_ms(b, share, tail=True) <= prof.slo_ms / 2:
                    batch = b
            out[s] = ServiceTarget(gpus, share, batch)  # first fit: k equal slices per GPU
        return out
