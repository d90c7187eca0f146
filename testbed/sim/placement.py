"""Where the simulator puts new instances of a share: on the GPUs a policy names, else first fit.

`testbed.cluster.local` places its replicas by a rule of its own (a wanted GPU that is full falls
back to the first that fits there; here the instance is not placed): see `place`.
"""

from __future__ import annotations

from collections.abc import Sequence

from testbed.sim.batched_service import EPS


def place(free: list[float], share: float, count: int, wanted: Sequence[int] | None) -> list[int]:
    """GPUs for up to `count` new instances of `share` %, each taken from `free` (changed in place):
    the k-th on `wanted[k]` when given, and left out when it does not fit there; else on the first
    GPU it fits on. Returns the GPU of each instance placed, in order."""
    placed: list[int] = []
    for k in range(max(count, 0)):
        options = [wanted[k]] if wanted is not None else range(len(free))
        gpu = next((g for g in options if free[g] + EPS >= share), None)
        if gpu is None:
            continue
        free[gpu] -= share
        placed.append(gpu)
    return placed
