"""Where a LocalCluster's replicas go: emulated GPUs of four 25 % units, each replica holding a
share of one, and the free share or units that leaves."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from testbed.cluster.local.replicas import ReplicaTable
from testbed.cluster.placement import first_fit
from testbed.profiles import ServiceProfile


class GpuPlacement:
    """Emulated GPUs (issue 15): the units are DRAFAS's 25 % slices, four to a GPU; the last GPU
    has the units left over. A live replica holds its share until its process has exited."""

    def __init__(self, total_units: int, table: ReplicaTable, profiles: dict[str, ServiceProfile]) -> None:
        self.total_units = total_units
        self._table = table
        self._profiles = profiles
        self._caps = [100.0] * (total_units // 4) + [25.0 * (total_units % 4)] * bool(total_units % 4)
        self._prefer: dict[str, list[int]] = {}  # GPUs a policy asked for, for replicas to come

    def gpu_free_pct(self) -> list[float]:
        free = list(self._caps)
        for r in self._table.live():
            free[r.gpu] -= r.share
        return [max(0.0, f) for f in free]

    def free_units(self) -> int:
        live = self._table.live()
        if all(r.share == 25.0 for r in live):
            return self.total_units - sum(self._profiles[r.service].units for r in live)
        return sum(int(free / 25.0 + 1e-9) for free in self.gpu_free_pct())

    def fits(self, share: float, count: int) -> int:
        """How many of `count` replicas of `share` % fit the GPUs' free share, first fit."""
        free = self.gpu_free_pct()
        n = 0
        for _ in range(max(count, 0)):
            g = first_fit(free, share)
            if g is None:
                break
            free[g] -= share
            n += 1
        return n

    @contextlib.contextmanager
    def preferring(self, service: str, gpus: list[int]) -> Iterator[None]:
        """Within: the service's next replicas go to `gpus` in turn where they fit; after, a
        replica (one replaced later, say) goes where it fits."""
        self._prefer[service] = gpus
        try:
            yield
        finally:
            self._prefer[service] = []

    def place(self, service: str, share: float) -> int:
        """The GPU a policy asked for if the share fits there, else the first that fits."""
        prefer = self._prefer.get(service)
        wanted = prefer.pop(0) if prefer else None
        free = self.gpu_free_pct()
        if wanted is not None and 0 <= wanted < len(free) and first_fit(free, share, [wanted]) is not None:
            return wanted
        gpu = first_fit(free, share)
        return 0 if gpu is None else gpu
