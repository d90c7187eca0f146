"""The one fit rule of both clusters (the local testbed's and the simulator's): a share fits a GPU
whose free share reaches it, and a new replica goes on the first GPU it fits on."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

FIT_SLACK_PCT = 1e-9  # shares are sums of floats: 4 x 25 % must fit 100 %


def first_fit(free: Sequence[float], share: float, among: Iterable[int] | None = None) -> int | None:
    """The first GPU (of `among`, default all) whose free share in `free` fits `share` %."""
    return next((g for g in (range(len(free)) if among is None else among)
                 if free[g] + FIT_SLACK_PCT >= share), None)
