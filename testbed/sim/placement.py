"""Where the simulator puts new instances of a share: on the GPUs a policy names, else first fit.

The fit rule is the local cluster's (`testbed.cluster.placement.first_fit`); what differs is the
fallback: `testbed.cluster.local` puts a replica whose wanted GPU is full on the first that fits,
here the instance is not placed (see `place`).
"""

from __future__ import annotations

from collections.abc import Sequence

from testbed.cluster.placement import first_fit


def place(free: list[float], share: float, count: int, wanted: Sequence[int] | None) -> list[int]:
    """GPUs for up to `count` new instances of `share` %, each taken from `free` (changed in place):
    the k-th on `wanted[k]` when given, and left out when it does not fit there; else on the first
    GPU it fits on. Returns the GPU of each instance placed, in order."""
    placed: list[int] = []
    for k in range(max(count, 0)):
        gpu = first_fit(free, share, [wanted[k]] if wanted is not None else None)
        if gpu is None:
            continue
        free[gpu] -= share
        placed.append(gpu)
    return placed
