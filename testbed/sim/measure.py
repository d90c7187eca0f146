"""How a testbed reads one simulated period: the local balancer's integral, or DRAFAS's Prometheus.

The simulator's own reading (`SimService`, the published simulator's) samples utilization once a
second on the second and counts every request that finishes in the period. A `Measurement`
replaces it with the reading of a real testbed, computed from the same requests:

- `utilization="integral"`: the local testbed's balancer, the time mean over the period of
  sum(min(in_flight, capacity) / capacity) over the replicas in rotation divided by their number
  (docs/metrics.md), here exact over the simulated requests;
- `utilization="scraped"`: the DRAFAS testbed (tu-nv/drafas drl/env.py:157):
  `sum(avg_over_time(clamp_max(envoy_http_downstream_rq_active, cap)[30s:1s])) / pods`, i.e. each
  pod's sidecar in-flight gauge read at Prometheus's 1 s scrapes (utils_services/
  prometheus-deployment.yaml:15-16), at that pod's own scrape phase, averaged over the scrapes the
  pod had in the period, summed over pods and divided by the pods counted at the query;
- `slo_window="scrape"`: the SLO violation rate, mean latency and request rate read with
  `increase(...[30s])` over counters scraped each second (env.py:147-151): per pod, the requests
  that finish between its first and last scrape of the period (29 s; the second between two
  periods is in neither), refusals (429, a full queue) as violations, the rate extrapolated by
  30/29 as `increase` does. A request refused for want of a ready replica never reaches a
  sidecar and is not counted.

`phase_drift` moves every pod's scrape phase against the client's seconds by that many seconds
per second (the client's schedule drifts against the scrapes, whose phase is fixed per target):
0 keeps each pod's phase for its life. `scrape_jitter` moves each scrape against the requests by
a uniform draw up to that many seconds (1: every scrape at a random instant of its second).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

UTILIZATIONS = ("sampled", "integral", "scraped")
SLO_WINDOWS = ("period", "scrape")
SCRAPE_S = 1.0  # DRAFAS's Prometheus scrape interval (prometheus-deployment.yaml:15-16)


@dataclass(frozen=True)
class Measurement:
    """A testbed's way of reading a simulated period (see the module docstring)."""

    utilization: str = "sampled"  # UTILIZATIONS; "sampled": the simulator's own (SimService)
    slo_window: str = "period"  # SLO_WINDOWS; "period": every request that finishes in it
    phase_drift: float = 0.0  # s of scrape phase per s against the client's seconds
    # s: each scrape lands later than its phase by a uniform draw in [0, scrape_jitter) against
    # the client's requests (their send times' jitter, and the scrape's own); 0: on the phase
    scrape_jitter: float = 0.0
    # whether the utilization's denominator counts starting replicas (pods in phase Running,
    # env.py:129-133); None: as the simulator's options say (SimOptions.util_counts_starting)
    counts_starting: bool | None = None

    def __post_init__(self) -> None:
        if self.utilization not in UTILIZATIONS:
            raise ValueError(f"utilization {self.utilization!r}; known: {', '.join(UTILIZATIONS)}")
        if self.slo_window not in SLO_WINDOWS:
            raise ValueError(f"slo_window {self.slo_window!r}; known: {', '.join(SLO_WINDOWS)}")

    @property
    def scrapes(self) -> bool:
        """Whether the reading needs each replica's scrape phase."""
        return self.utilization == "scraped" or self.slo_window == "scrape"


class Replica(Protocol):
    """What the reading needs of one simulated replica (`SimInstance`)."""

    ready_at: float
    removed_at: float | None
    created_at: float
    scrape_phase: float

    @property
    def draining(self) -> bool: ...


@dataclass
class Period:
    """One period's requests as the simulator served them, and its replicas."""

    t0: float
    t1: float
    arrivals: np.ndarray  # arrival times of the period's requests, sorted
    finish: np.ndarray  # their finish times (NaN: refused)
    owner: np.ndarray  # the replica (index into `replicas`) each went to, -1: none ready
    held: list[list[float]]  # per replica, finish times of the requests it held at t0
    replicas: list[Replica]
    capacity: int
    counts_starting: bool  # the utilization's denominator counts starting replicas
    rng: np.random.Generator | None = None  # the scrapes' jitter (Measurement.scrape_jitter)


def phase_at(replica: Replica, t: float, drift: float) -> float:
    """The replica's scrape phase (s after each whole second, in [0, 1)) around time t."""
    return (replica.scrape_phase + drift * t) % SCRAPE_S


def _counted(period: Period, at: float) -> int:
    """Replicas the utilization is divided by at the query time `at`: not draining, and ready (or
    only holding units, with `counts_starting`: the pods in phase Running, env.py:129-133)."""
    return sum(1 for r in period.replicas
               if not r.draining and (period.counts_starting or r.ready_at <= at + 1e-9))


def _own(period: Period, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrival and finish times of replica k's served requests, the ones it held at t0 first."""
    mine = (period.owner == k) & (period.finish == period.finish)
    held = np.asarray(period.held[k], dtype=float)
    return (np.concatenate((np.full(len(held), period.t0), period.arrivals[mine])),
            np.concatenate((held, period.finish[mine])))


def integral_utilization(period: Period) -> float:
    """The time mean over the period (where a replica counts) of the counted replicas' summed
    min(in_flight, capacity) / capacity over their number: the local balancer's reading."""
    t0, t1 = period.t0, period.t1
    live = [k for k, r in enumerate(period.replicas) if not r.draining]
    edges = sorted({t0, t1, *(period.replicas[k].ready_at for k in live
                              if t0 < period.replicas[k].ready_at < t1)})
    edges = np.asarray(edges)
    weighted = np.zeros(len(edges) - 1)  # per piece: sum over counted replicas of busy seconds
    counts = np.zeros(len(edges) - 1)
    for k in live:
        r = period.replicas[k]
        starts, ends = _own(period, k)
        busy = _busy_before(starts, ends, edges, period.capacity)
        ready = edges[:-1] + 1e-9 >= r.ready_at
        counted = np.ones_like(ready) if period.counts_starting else ready
        weighted += np.where(ready, np.diff(busy), 0.0)
        counts += counted
    seen = counts > 0
    if not seen.any():
        return 0.0
    lengths = np.diff(edges)
    return float(np.sum(weighted[seen] / counts[seen]) / np.sum(lengths[seen]))


def _busy_before(starts: np.ndarray, ends: np.ndarray, at: np.ndarray, capacity: int) -> np.ndarray:
    """Integral of min(in_flight, capacity) / capacity from -inf to each time of `at`, for
    requests in flight over [starts, ends)."""
    if len(starts) == 0:
        return np.zeros(len(at))
    if capacity == 1:  # busy while anything is in flight: the union of the intervals
        order = np.argsort(starts, kind="stable")
        s, e = starts[order], ends[order]
        reach = np.maximum.accumulate(e)
        new = np.ones(len(s), dtype=bool)
        new[1:] = s[1:] > reach[:-1]
        first = np.flatnonzero(new)
        lo = s[first]
        hi = np.maximum.reduceat(reach, first)
        return np.clip(at[:, None] - lo[None, :], 0.0, (hi - lo)[None, :]).sum(axis=1)
    times = np.concatenate((starts, ends))
    steps = np.concatenate((np.ones(len(starts)), -np.ones(len(ends))))
    order = np.argsort(times, kind="stable")
    times, level = times[order], np.minimum(np.cumsum(steps[order]), capacity) / capacity
    area = np.concatenate(([0.0], np.cumsum(level[:-1] * np.diff(times))))
    idx = np.searchsorted(times, at, side="right") - 1
    out = np.where(idx >= 0, area[np.maximum(idx, 0)]
                   + level[np.maximum(idx, 0)] * (at - times[np.maximum(idx, 0)]), 0.0)
    return out


def scraped_utilization(period: Period, drift: float, jitter: float = 0.0) -> float:
    """Each pod's in-flight gauge at its 1 s scrapes in the period, clamped at capacity and
    averaged over the scrapes it had (from its creation until it is gone), summed over pods and
    divided by the pods counted at the query (the period's end)."""
    t0, t1 = period.t0, period.t1
    total = 0.0
    for k, r in enumerate(period.replicas):
        at = t0 + phase_at(r, t0, drift) + np.arange(0.0, t1 - t0, SCRAPE_S)
        if jitter > 0 and period.rng is not None:
            at = at + period.rng.uniform(0.0, jitter, len(at))
        at = at[(at < t1) & (at >= r.created_at)]
        if r.removed_at is not None:
            at = at[at < r.removed_at]
        if len(at) == 0:
            continue
        starts, ends = _own(period, k)
        in_flight = (np.searchsorted(np.sort(starts), at, side="right")
                     - np.searchsorted(np.sort(ends), at, side="right"))
        total += float(np.mean(np.minimum(in_flight, period.capacity))) / period.capacity
    n = _counted(period, t1)
    return total / n if n else 0.0


@dataclass
class ScrapeCounts:
    """One period's counters as `increase(...[30s])` reads them (SLO window "scrape")."""

    requests: int  # every counted request (istio_requests_total), extrapolated by 30/29
    served: int  # status 200, in the latency histogram's count
    refused: int  # refused by the replica (429 or a full queue): violations
    slow: int  # served slower than the SLO
    latency_sum_s: float  # summed latency of the served ones


class ScrapeCounter:
    """Counts each request in the period whose scrapes of its pod bracket its end; carries the
    served requests that finish after the period to the next ones (by their pod's phase)."""

    def __init__(self, slo_s: float, drift: float):
        self.slo_s = slo_s + 1e-6
        self.drift = drift
        self._carried = (np.empty(0), np.empty(0), np.empty(0))  # finish, latency, phase

    def count(self, period: Period) -> ScrapeCounts:
        t0, t1 = period.t0, period.t1
        phases = np.array([phase_at(r, t0, self.drift) for r in period.replicas])
        a, f, owner = period.arrivals, period.finish, period.owner
        seen = owner >= 0  # refused for want of a ready replica: never reaches a sidecar
        ph = np.where(seen, phases[np.maximum(owner, 0)] if len(phases) else 0.0, 0.0)
        ok = seen & (f == f)
        refused = seen & (f != f)
        c_f, c_lat, c_ph = self._carried
        finish = np.concatenate((c_f, f[ok]))
        latency = np.concatenate((c_lat, f[ok] - a[ok]))
        phase = np.concatenate((c_ph, ph[ok]))
        later = finish >= t1
        self._carried = (finish[later], latency[later], phase[later])
        inside = ~later & _in_scrapes(finish, phase, t0, t1)
        n_refused = int(np.count_nonzero(_in_scrapes(a[refused], ph[refused], t0, t1)))
        lat = latency[inside]
        served = len(lat)
        return ScrapeCounts(
            requests=round((served + n_refused) * (t1 - t0) / (t1 - t0 - SCRAPE_S)),
            served=served,
            refused=n_refused,
            slow=int(np.count_nonzero(lat > self.slo_s)),
            latency_sum_s=float(lat.sum()),
        )


def _in_scrapes(t: np.ndarray, phase: np.ndarray, t0: float, t1: float) -> np.ndarray:
    """Whether each time lies between its pod's first and last scrape of [t0, t1): in
    (t0 + phase, t1 - 1 s + phase]."""
    return (t > t0 + phase) & (t <= t1 - SCRAPE_S + phase)


@dataclass(frozen=True)
class WayOfMeasuring:
    """A named way of measuring: what a report calls it, and the reading it gives the simulator."""

    title: str
    measurement: Measurement | None  # None: the engine's own (the simulator's reading, unchanged)


# The named ways of measuring (a scenario's `measure:`, `testbed sim eval|tables --measure`)
MEASURES: dict[str, WayOfMeasuring] = {
    "harness": WayOfMeasuring("the harness's way", None),
    "drafas": WayOfMeasuring(
        "measure: drafas (the DRAFAS testbed's Prometheus: each sidecar's in-flight gauge at its "
        "1 s scrape, its phase drifting 1 ms/s against the client, over Running pods; counters by "
        "increase() between scrapes)",
        # the phase drift: the DRAFAS client sleeps each trace line's second and never looks at a
        # clock (client/client.py:293); each asyncio sleep wakes ~0.6 ms late on an idle loop
        # (epoll's millisecond timeout) and ~1 ms beside the imgcls client's JPEG encoding
        # (bench/client_drift.py), so its seconds slide against the scrapes by ~1 ms per second
        Measurement(utilization="scraped", slo_window="scrape", phase_drift=1e-3,
                    counts_starting=True)),
}
DEFAULT_MEASURE = "harness"
