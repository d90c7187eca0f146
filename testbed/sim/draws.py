"""A service's random draws: each request's processing time and each new replica's start-up delay,
as the published simulator draws them."""

from __future__ import annotations

import numpy as np

from testbed.profiles import ServiceProfile


def draw_proc_times(profile: ServiceProfile, n: int, rng: np.random.Generator) -> np.ndarray:
    """Processing times (s) of `n` requests: whole milliseconds, uniform over the range inclusive,
    when the range's ends are whole (the published simulator's `random.randint`), else uniform."""
    lo, hi = profile.proc_time_ms
    if float(lo).is_integer() and float(hi).is_integer():
        return rng.integers(int(lo), int(hi) + 1, n) / 1000.0
    return rng.uniform(lo / 1000.0, hi / 1000.0, n)


def startup_rng(rng: np.random.Generator) -> np.random.Generator:
    """The start-up delays' own stream, split from the service's after its processing times."""
    return np.random.default_rng(rng.integers(2**63))


def draw_startup(profile: ServiceProfile, rng: np.random.Generator) -> float:
    """Seconds from scale-up to ready: startup_ms, or a whole number of seconds drawn uniformly
    from [startup, startup_max] (the published simulator: `random.randint(startup_s, 30)`)."""
    if profile.startup_max_ms is None or profile.startup_max_ms <= profile.startup_ms:
        return profile.startup_ms / 1000.0
    lo, hi = int(profile.startup_ms // 1000), int(profile.startup_max_ms // 1000)
    return float(rng.integers(lo, hi + 1))
