"""One scaler period of one service, as raw counts: what every metrics backend produces."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the window carries the profile a policy reads; the metrics never import it
    from testbed.profiles import ServiceProfile


@dataclass(frozen=True)
class WindowMetrics:
    """What a service did in one scaler period (30 s, time-scaled on the local profile).

    The simulator, the local testbed (in-process load balancer) and the lab (Prometheus) all
    produce this; the scaler's state builder normalises it. Counts, not rates, so windows add up.
    """

    service: str
    seconds: float  # length of the window
    arrivals: int  # requests that arrived at the service in the window
    completed: int  # requests that finished (success or failure) in the window
    violations: int  # failed, dropped, timed out, or slower than the SLO threshold
    utilization: float  # time mean of the mean over ready instances of
    #                     min(in_flight, capacity) / capacity  (the dissertation's definition;
    #                     the simulator samples it each second, the testbed integrates it:
    #                     docs/metrics.md)
    instances: int  # ready instances at the end of the window
    # mean latency of the requests completed in the window, ms: from arrival at the service (its
    # headers) to the answer, so the upload of the request's body and queueing included (was
    # `mean_proc_time_ms`, kept as an alias); `mean_service_latency_ms` leaves the upload out
    mean_latency_ms: float | None = None
    # requests waiting at the service at the window's end: sum over its replicas of
    # max(0, in_flight - capacity), i.e. arrived, not finished and not yet being processed (the
    # GPU simulator adds the requests of its central queue's open batch); None: not measured (the
    # simulator measures it only while a policy observes its windows, ScalerLoop.observes)
    queue_length: int | None = None
    # latency percentiles of the requests served in the window (dropped ones left out), ms,
    # interpolated between ranks as the results are; None: none served, or not measured (the
    # simulator measures them, as the queue, only while a policy observes its windows)
    p50_latency_ms: float | None = None
    p95_latency_ms: float | None = None
    p99_latency_ms: float | None = None
    # requests refused on arrival in the window (a full queue, the rate limit, no ready replica);
    # None: not measured. `admitted` = arrivals - dropped
    dropped: int | None = None
    # of `mean_latency_ms`, the mean time the service spent receiving a request's body (its
    # upload over the UE's slice), ms; None where there is no network in between (the
    # simulator) or it is not told apart (the lab's sidecar histograms)
    mean_upload_ms: float | None = None
    # the profile the service runs with (its SLO, timing, capacity, GPU curve); the control loop
    # sets it on the window a policy's observe() gets, None elsewhere
    profile: ServiceProfile | None = field(default=None, compare=False, hash=False)

    @classmethod
    def fast(cls, **values: Any) -> WindowMetrics:
        """The constructor's instance from its keywords (every field without a default, any of
        the others but `profile`), for a simulator that builds one per step: it fills the fields
        in two dict updates instead of the frozen class's object.__setattr__ per field (0.28 us
        against 0.66 us; equality, hash and repr read the same fields). Unchecked: a missing or
        unknown name is the caller's bug, which the constructor would have raised."""
        window = object.__new__(cls)
        own = window.__dict__
        own.update(_UNMEASURED)
        own.update(values)
        return window

    def with_profile(self, profile: ServiceProfile | None) -> WindowMetrics:
        """This window carrying the service's `profile` (what a policy's observe() gets)."""
        return replace(self, profile=profile)

    @property
    def request_rate(self) -> float:
        """Arrivals per second over the window."""
        return self.arrivals / self.seconds if self.seconds > 0 else 0.0

    @property
    def slo_violation_rate(self) -> float:
        """Violations per completed request (dropped ones count as both)."""
        return self.violations / self.completed if self.completed else 0.0

    @property
    def admitted(self) -> int | None:
        """Requests let in (arrivals - dropped); None where drops are not measured."""
        return None if self.dropped is None else self.arrivals - self.dropped

    @property
    def slo_ms(self) -> float | None:
        """The service's SLO threshold, ms (from `profile`; None without one)."""
        return None if self.profile is None else self.profile.slo_ms

    @property
    def mean_service_latency_ms(self) -> float | None:
        """`mean_latency_ms` without the upload: from the whole request received to its answer
        (queueing and processing), which a network fade does not lengthen. Where the upload is
        not measured (`mean_upload_ms` None: the simulator has none), `mean_latency_ms`."""
        if self.mean_latency_ms is None or self.mean_upload_ms is None:
            return self.mean_latency_ms
        return max(0.0, self.mean_latency_ms - self.mean_upload_ms)

    @property
    def mean_proc_time_ms(self) -> float | None:
        """The old name of `mean_latency_ms` (it always included queueing), kept for policies
        that read it."""
        return self.mean_latency_ms


PERCENTILES = (50.0, 95.0, 99.0)  # the window's p50/p95/p99_latency_ms


def latency_percentiles(latencies_ms: Sequence[float]) -> dict[str, float | None]:
    """The window's `p50/p95/p99_latency_ms` fields for these latencies (ms): interpolated linearly
    between the two nearest ranks (numpy's default, as the results' percentiles), None for none."""
    if len(latencies_ms) == 0:
        return dict.fromkeys(("p50_latency_ms", "p95_latency_ms", "p99_latency_ms"))
    p50, p95, p99 = (float(x) for x in np.percentile(np.asarray(latencies_ms, dtype=float),
                                                      PERCENTILES))
    return {"p50_latency_ms": p50, "p95_latency_ms": p95, "p99_latency_ms": p99}


# the fields `WindowMetrics.fast` leaves None unless given (as the constructor's defaults)
_UNMEASURED = {f.name: None for f in fields(WindowMetrics) if f.default is None}
