"""A scaler period's `WindowMetrics` from the mesh's metrics in Prometheus, by PromQL over HTTP.

The lab's metrics backend, and the local profile's with `--metrics prometheus` (the local load
balancer exports the same series, `testbed.metrics.mesh`). It measures what the local profile's
in-process load balancer measures:

- completed requests and failures: Istio's `istio_requests_total` (reporter="destination");
- SLO violations: failures plus successes above the SLO bucket of
  `istio_request_duration_milliseconds_bucket` (the bucket boundary must equal the SLO, set per pod
  with the `sidecar.istio.io/statsHistogramBuckets` annotation on the lab);
- mean processing time: the same histogram's `_sum / _count` over every completion, failures
  included, as the in-process source counts it;
- instance utilization (docs/metrics.md): the time mean of u(t), the mean over the ready replicas
  of min(in_flight, capacity)/capacity, as the in-process balancer integrates it. Per scrape
  step, the increase of the replicas' busy-seconds counters (`testbed_replica_busy_seconds_total`,
  the integral of min(in_flight, capacity)/capacity) over the step, divided by the step and by
  the number of those series then (the ready replicas), averaged over the window's steps that
  had one (`_utilization`); no reading of the in-flight gauge, whose once-a-second samples alias
  with evenly spaced requests;
- arrivals: completions plus the change of requests in flight over the window (conservation;
  Istio counts a request only when it completes);
- queue length: at the window's end, the sum over replicas of max(0, in flight - capacity) from
  the same in-flight gauge (the requests a replica holds beyond those it processes at once).

Counter increases are the last value in the window minus the last value before it, per series
(`_increase`): exact to the scrape, where `increase()` extrapolates to the window's edges (a few
per cent on a 15 s window) and cannot see a series' first count.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from testbed.clock import REAL_TIME, ScenarioClock
from testbed.errors import MissingRequirement, StateError
from testbed.metrics.drafas import DrafasQueries, drafas_window
from testbed.metrics.mesh import DOWNSTREAM_IN_FLIGHT
from testbed.metrics.promql import PromService, duration, le_regex
from testbed.metrics.window import WindowMetrics

Fetch = Callable[[str, float], bytes]  # (url, timeout_s) -> body
# how a window is read: the harness's (this module's docstring), or the DRAFAS testbed's
# (testbed.metrics.drafas): a scenario's `measure:` names one
READINGS = ("harness", "drafas")


LOOKBACK = "1h"  # how far before a window a series' last value is looked for


def _quantile(q: float, req: str, w: str) -> str:
    """The q-quantile of the served (not dropped: 503) requests' duration over the last `w`, from
    the duration histogram's buckets (interpolated within a bucket, as Prometheus does)."""
    buckets = f'istio_request_duration_milliseconds_bucket{{{req},response_code!="503"}}'
    return f"histogram_quantile({q:g}, sum by (le) (increase({buckets}[{w}])))"


def _increase(selector: str, w: str) -> str:
    """Sum over series of (last value in the last `w`) - (last value before it; 0 for a series
    that is new in the window)."""
    now = f"last_over_time({selector}[{w}])"
    before = f"last_over_time({selector}[{LOOKBACK}] offset {w})"
    return f"(sum({now}) - (sum({before} and {now}) or vector(0)))"


GRACE_STEPS = 10  # how many scrape intervals a failed target's last values stand in for


def _bridged(selector: str, grace: str, offset: str = "") -> str:
    """`selector`'s series now, and those of a target whose scrape failed within `grace`, at
    their last value before it. A failed scrape (a target slower to answer than the scrape
    timeout: an event loop busy past one interval) marks every series of its target stale; the
    bare selector then loses them until the next good scrape, and a replica count or in-flight
    sum read there would say the replicas were gone. A series gone from a good scrape (a replica
    taken out) is gone at once, as before."""
    at = f" offset {offset}" if offset else ""
    return (f"({selector}{at} or (last_over_time({selector}[{grace}]{at}) "
            f"and on(job, instance) (min_over_time(up[{grace}]{at}) == 0)))")


def _utilization(selector: str, w: float, step_s: float) -> str:
    """The time mean over the last `w` seconds of the mean busy fraction of the replicas `selector`'s
    busy-seconds series stand for: at each step of a `step_s` subquery, the increase of every
    series since its last value before the step (from 0 for a series with none in the lookback)
    summed, over the step and over the count of series; `avg_over_time` skips the steps without
    a series. The steps' increases telescope, so the busy seconds are exact to the scrape; only
    where the count changes within a step is that step's share divided by the count at its end.
    A failed scrape changes nothing: the series are bridged over it (`_bridged`), and the
    increase before a step is read from the last value, not from the instant a step before,
    which a failed scrape leaves empty (and the whole counter then read as one step's increase).

    The steps are aligned to multiples of the step, and each reads the step before it: over a
    range of `w` they would cover up to a whole step before the window (Prometheus 2 takes a
    step on the range's start, 3 does not). The range is half a step shorter, so the covered
    span starts within half a step of the window's start on either version."""
    step = duration(step_s)
    now = _bridged(selector, duration(GRACE_STEPS * step_s))
    delta = f"(({now} - last_over_time({selector}[{LOOKBACK}] offset {step})) or {now})"
    span = duration(max(w - step_s / 2, step_s))
    return f"avg_over_time((sum({delta}) / count({now}) / {step_s:g})[{span}:{step}])"


@dataclass(frozen=True)
class WindowQueries:
    """The PromQL for one service and window length, each returning one scalar-like vector."""

    completed: str
    failed: str
    within_slo: str
    latency_sum_ms: str
    latency_count: str
    utilization: str
    in_flight_now: str
    in_flight_before: str
    instances: str
    waiting: str
    dropped: str
    p50_latency_ms: str
    p95_latency_ms: str
    p99_latency_ms: str

    @classmethod
    def build(cls, svc: PromService, seconds: float, step_s: float = 1.0) -> WindowQueries:
        w = duration(seconds)
        req = (f'reporter="destination",destination_workload_namespace="{svc.namespace}",'
               f'destination_service_name="{svc.name}"')
        pod = f'namespace="{svc.namespace}",app="{svc.app or svc.name}"'
        active = f'envoy_cluster_upstream_rq_active{{{pod},cluster_name=~"inbound\\\\|.*"}}'
        ok = f'{req},response_code=~"2.."'
        grace = duration(GRACE_STEPS * step_s)
        active_now = _bridged(active, grace)
        return cls(
            completed=_increase(f"istio_requests_total{{{req}}}", w),
            failed=_increase(f'istio_requests_total{{{req},response_code!~"2.."}}', w),
            within_slo=_increase(f'istio_request_duration_milliseconds_bucket{{{ok},'
                                 f'le=~"{le_regex(svc.slo_ms)}"}}', w),
            latency_sum_ms=_increase(f"istio_request_duration_milliseconds_sum{{{req}}}", w),
            latency_count=_increase(f"istio_request_duration_milliseconds_count{{{req}}}", w),
            utilization=_utilization(f"testbed_replica_busy_seconds_total{{{pod}}}", seconds,
                                     step_s),
            in_flight_now=f"sum({active_now})",
            in_flight_before=f"sum({_bridged(active, grace, offset=w)})",
            instances=f"count({active_now})",
            waiting=f"sum(clamp_min({active_now} - {svc.capacity}, 0))",
            dropped=_increase(f'istio_requests_total{{{req},response_code="503"}}', w),
            **{f"p{q}_latency_ms": _quantile(q / 100, req, w) for q in (50, 95, 99)},
        )

    def items(self) -> list[tuple[str, str]]:
        return list(self.__dict__.items())


def series_checks(svc: PromService, reading: str = "harness") -> list[tuple[str, str]]:
    """(selector, what exports it) of the series a window read the `reading` way cannot do
    without."""
    pod = f'namespace="{svc.namespace}",app="{svc.app or svc.name}"'
    if reading == "drafas":
        return [(f"{DOWNSTREAM_IN_FLIGHT}{{{pod}}}",
                 "are its pods running with the Istio sidecar, scraped, and does the mesh's "
                 "proxyStatsMatcher include downstream_rq_active (playbooks/roles/istio)?")]
    return [(f"envoy_cluster_upstream_rq_active{{{pod}}}",
             "are its pods running with the Istio sidecar, and scraped?"),
            (f"testbed_replica_busy_seconds_total{{{pod}}}",
             "is the busy meter running in its pods (testbed/cluster/manifest.py), and scraped?")]


def parse_response(body: bytes | str, query: str = "") -> float | None:
    """The single number of an instant-query answer; None when the result is empty.

    Handles the documented shapes: `{"status": "success", "data": {"resultType": "vector",
    "result": [{"metric": {...}, "value": [ts, "1.5"]}]}}`, `"scalar"` (`"result": [ts, "1"]`),
    `"matrix"` (last value of each series, summed), and `{"status": "error", ...}`.
    """
    try:
        doc = json.loads(body)
    except (ValueError, TypeError) as exc:
        raise StateError(f"Prometheus answered with something that is not JSON ({exc}): {query}") \
            from None
    if doc.get("status") != "success":
        raise StateError(f"Prometheus rejected the query ({doc.get('errorType', '?')}: "
                         f"{doc.get('error', 'no error message')}): {query}")
    data = doc.get("data") or {}
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        return _number(result[1])
    if kind == "vector":
        values = [_number(r["value"][1]) for r in result]
    elif kind == "matrix":
        values = [_number(r["values"][-1][1]) for r in result if r.get("values")]
    else:
        raise StateError(f"Prometheus answered an unexpected result type {kind!r}: {query}")
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _number(text: str) -> float | None:
    value = float(text)  # Prometheus sends "NaN", "+Inf", "-Inf" as strings too
    return None if math.isnan(value) else value


def _urllib_fetch(url: str, timeout_s: float) -> bytes:
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.read()
    except urllib.error.HTTPError as exc:
        # 400/422 carry the JSON error document that says what was wrong with the query.
        return exc.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MissingRequirement(f"Prometheus at {url.split('/api/')[0]} is unreachable: {reason}") \
            from None


class PrometheusMetrics:
    """`window(service, seconds)` → WindowMetrics from the lab's Prometheus HTTP API."""

    def __init__(self, base_url: str, services: Iterable[PromService], *, timeout_s: float = 10.0,
                 fetch: Fetch = _urllib_fetch, now: Callable[[], float] = time.time,
                 clock: ScenarioClock = REAL_TIME, step_s: float = 1.0,
                 reading: str = "harness", running: Callable[[str], int] | None = None):
        """`clock`: the run's time scale (the local profile's runs; the lab's is real time):
        windows are asked for in scenario seconds and answered in them, latencies too, while
        Prometheus and the exporters live in wall time (`now`). `step_s`: the scrape interval
        (wall). `reading`: how a window is read, READINGS (a scenario's `measure:`); "drafas"
        takes the pods in phase Running of a service from `running`."""
        if reading not in READINGS:
            raise ValueError(f"unknown reading {reading!r}; known: {', '.join(READINGS)}")
        if reading == "drafas" and running is None:
            raise ValueError("the drafas reading counts Running pods: give `running`")
        self.reading, self.running = reading, running
        self.base_url = base_url.rstrip("/")
        self._services = {s.name: s for s in services}
        self.timeout_s = timeout_s
        self._fetch = fetch
        self._now = now
        self.clock = clock
        self.step_s = step_s
        self.started = now()  # `totals` count from here (see `restart`)

    def check(self) -> str:
        """Reachable and answering the API: its version (GET /api/v1/status/buildinfo)."""
        body = self._fetch(f"{self.base_url}/api/v1/status/buildinfo", self.timeout_s)
        try:
            doc = json.loads(body)
            return str(doc["data"]["version"])
        except (ValueError, TypeError, KeyError) as exc:
            raise StateError(f"{self.base_url} does not answer like Prometheus's HTTP API "
                             f"(/api/v1/status/buildinfo: {exc})") from None

    def check_series(self) -> None:
        """Every service's replicas are in Prometheus with the series the windows read: their
        in-flight gauge (the mesh's proxy) and busy seconds (the busy meter); one line naming
        the first that is missing, before a run starts."""
        for svc in self._services.values():
            for series, who in series_checks(svc, self.reading):
                if not self.query(f"count({series})"):
                    raise StateError(
                        f"Prometheus at {self.base_url} has no {series.split('{')[0]} series "
                        f"for {svc.name} (namespace {svc.namespace}): {who}")

    def for_services(self, names: Iterable[str], *, reading: str = "harness",
                     running: Callable[[str], int] | None = None) -> PrometheusMetrics:
        """The same Prometheus for a subset of the services (a cell's), counting from now, read
        the way `reading` names (its Running pods from `running`, as the constructor's)."""
        keep = set(names)
        return PrometheusMetrics(self.base_url, [s for s in self._services.values()
                                                 if s.name in keep],
                                 timeout_s=self.timeout_s, fetch=self._fetch, now=self._now,
                                 clock=self.clock, step_s=self.step_s, reading=reading,
                                 running=running)

    # --- MetricsSource ------------------------------------------------------------------------

    def restart(self) -> None:
        """Count `totals` from now (the runner's cells each start from zero)."""
        self.started = self._now()

    def windows(self, seconds: float) -> dict[str, WindowMetrics]:
        """Every configured service's last `seconds`, all at the same instant."""
        at = self._now()
        return {name: self.window(name, seconds, end=at) for name in self._services}

    def totals(self, service: str) -> tuple[int, int]:
        """(arrivals, SLO violations) since `started`: one window over that span."""
        at = self._now()
        w = self._harness_window(self._service(service),
                                 self.clock.scenario(max(at - self.started, 1.0)), at)
        return w.arrivals, w.violations

    def query(self, promql: str, at: float | None = None) -> float | None:
        """One instant query (GET /api/v1/query) evaluated at `at` (Unix seconds, default now)."""
        params = {"query": promql, "time": f"{self._now() if at is None else at:.3f}"}
        url = f"{self.base_url}/api/v1/query?{urllib.parse.urlencode(params)}"
        return parse_response(self._fetch(url, self.timeout_s), promql)

    def _service(self, service: str) -> PromService:
        try:
            return self._services[service]
        except KeyError:
            raise StateError(f"no metrics configured for service {service!r} "
                             f"(known: {', '.join(self._services)})") from None

    def window(self, service: str, seconds: float, *, end: float | None = None) -> WindowMetrics:
        """The window of `seconds` (scenario time) ending at `end` (default now), all queries at
        the same instant, read the way `reading` names."""
        svc = self._service(service)
        at = self._now() if end is None else end
        if self.reading == "drafas":
            assert self.running is not None
            q = DrafasQueries.build(svc, self.clock.wall(seconds), self.step_s)
            return drafas_window(service, seconds, {k: self.query(p, at) for k, p in q.items()},
                                 pods=self.running(service), capacity=svc.capacity,
                                 clock=self.clock)
        return self._harness_window(svc, seconds, at)

    def _harness_window(self, svc: PromService, seconds: float, at: float) -> WindowMetrics:
        """The harness's reading (the module docstring's)."""
        service = svc.name
        wall = self.clock.wall(seconds)
        q = WindowQueries.build(svc, wall, self.step_s)
        v = {name: self.query(promql, at) for name, promql in q.items()}
        completed = round(v["completed"] or 0)
        failed = round(v["failed"] or 0)
        successes = completed - failed
        within = round(v["within_slo"] or 0)
        slow = max(successes - within, 0)
        change = (v["in_flight_now"] or 0) - (v["in_flight_before"] or 0)
        count = v["latency_count"] or 0
        return WindowMetrics(
            service=service,
            seconds=float(seconds),
            arrivals=max(round(completed + change), 0),
            completed=completed,
            violations=min(failed + slow, completed),
            utilization=min(max(v["utilization"] or 0.0, 0.0), 1.0),
            instances=round(v["instances"] or 0),
            mean_latency_ms=(self.clock.scenario((v["latency_sum_ms"] or 0) / count)
                             if count > 0 else None),
            queue_length=max(round(v["waiting"] or 0), 0),
            dropped=max(round(v["dropped"] or 0), 0),
            **{k: _scaled_ms(v[k], self.clock)
               for k in ("p50_latency_ms", "p95_latency_ms", "p99_latency_ms")},
        )

    async def windows_async(self, seconds: float) -> dict[str, WindowMetrics]:
        """`windows` off the event loop: a local run's balancer shares the loop with the runner."""
        return await asyncio.to_thread(self.windows, seconds)

    async def totals_async(self, service: str) -> tuple[int, int]:
        return await asyncio.to_thread(self.totals, service)

    async def window_async(self, service: str, seconds: float, *,
                           end: float | None = None) -> WindowMetrics:
        """`window` off the event loop, for the asyncio scaler loop."""
        return await asyncio.to_thread(self.window, service, seconds, end=end)


def _scaled_ms(value: float | None, clock: ScenarioClock) -> float | None:
    """A quantile in scenario ms; None where no request was served (Prometheus answers NaN)."""
    if value is None or value != value:
        return None
    return clock.scenario(value)
