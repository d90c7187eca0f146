"""A real Prometheus server scraping the local load balancer's mesh-shaped series, read back through
`PrometheusMetrics`: the lab's queries against the real thing, and the two metrics sources of one
service agreeing on the same requests."""

import asyncio
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from testbed.cluster.replica import EmulatedReplica
from testbed.errors import StateError
from testbed.load.content import ContentSet
from testbed.metrics.agreement import UTILIZATION_ABS, compare
from testbed.metrics.balancer import LoadBalancer
from testbed.metrics.prometheus import PrometheusMetrics, PromService, WindowQueries, _increase
from testbed.metrics.server import PrometheusServer
from testbed.metrics.service_balancer import MESH_NAMESPACE
from testbed.profiles import ServiceProfile, default_profiles
from tests.metrics.test_balancer import replica_servers, send

pytestmark = [pytest.mark.skipif(shutil.which("prometheus") is None,
                                 reason="no prometheus server on PATH (scripts/setup installs it)"),
              pytest.mark.timed]

# 100 ms of work against a 250 ms SLO, 2 replicas of capacity 1: bursts of 6 queue up to 300 ms
PROFILE = ServiceProfile(capacity=1, queue_limit=20, proc_time_ms=(100, 100), startup_ms=0, slo_ms=250)


async def _burst(session: aiohttp.ClientSession, base: str, n: int) -> list[int]:
    return await send(session, base, n, ContentSet())


@asynccontextmanager
async def scraped_chatbot(tmp: Path, scrape_s: float
                          ) -> AsyncIterator[tuple[LoadBalancer, aiohttp.ClientSession,
                                                   PrometheusServer, PromService]]:
    """Two PROFILE replicas behind the balancer, a real Prometheus scraping its mesh series
    every `scrape_s`, a client session, and the service as Prometheus names it."""
    profiles = default_profiles() | {"chatbot": PROFILE}
    async with replica_servers(PROFILE) as (_, servers), \
            LoadBalancer(profiles, ["chatbot"], sample_interval_s=0.2) as lb, \
            aiohttp.ClientSession() as session:
        for i, s in enumerate(servers):
            lb.services["chatbot"].add(f"chatbot-{i}", str(s.make_url("")))
        target = lb.metrics_url.removeprefix("http://")
        async with PrometheusServer(tmp / "prom", [target], scrape_interval_s=scrape_s) as prom:
            yield lb, session, prom, PromService("chatbot", PROFILE.slo_ms, PROFILE.capacity,
                                                 MESH_NAMESPACE)


async def _measured(tmp: Path, bursts: list[int]):
    async with scraped_chatbot(tmp, 0.2) as (lb, session, prom, svc):
        prom_metrics = PrometheusMetrics(prom.url, [svc], step_s=0.2)
        # Prometheus has scraped the idle replicas for a while before the window starts:
        # utilization is a time mean over the window, so both must see all of it
        await asyncio.sleep(1.2)
        t0 = time.monotonic()
        statuses = []
        for n in bursts:
            statuses += await _burst(session, lb.endpoint("chatbot"), n)
            await asyncio.sleep(0.25)
        await asyncio.sleep(0.6)  # the last counts scraped
        # from before the first request: the balancer counts whole intervals that start
        # inside the window (nothing arrived earlier, so the margin adds no requests)
        span = time.monotonic() - t0 + 1.0
        local = lb.window(span)["chatbot"]
        # over the span the balancer's whole intervals cover, as a cell compares them
        remote = await asyncio.to_thread(prom_metrics.window, "chatbot", local.seconds)
        version = await asyncio.to_thread(prom_metrics.check)
        return statuses, local, remote, version


@pytest.mark.slow
def test_prometheus_reads_what_the_balancer_counted(tmp_path: Path):
    statuses, local, remote, version = asyncio.run(_measured(tmp_path, [6, 2, 6, 1, 4]))
    assert version.startswith("2.") or version.startswith("3.")
    assert statuses == [200] * 19
    assert remote.completed == local.completed == 19
    assert remote.arrivals == 19
    assert remote.violations == local.violations and local.violations > 0  # the queued tails
    assert remote.mean_proc_time_ms == pytest.approx(local.mean_proc_time_ms, rel=0.05)
    assert remote.utilization == pytest.approx(local.utilization, abs=0.05)
    assert remote.instances == 2
    assert remote.queue_length == local.queue_length == 0  # every request answered
    assert not (tmp_path / "prom").exists()  # stopped and removed


async def _scale_up_mid_window(tmp: Path, gap_s: float = 0.11, half_s: float = 4.0,
                               stall_at_s: float | None = None):
    """One replica busy ~90 % of the time (100 ms requests every 110 ms), a second one added
    halfway through the window (each then ~45 %): both sources' window over the same span, and
    what the old query (busy seconds over the window times the mean replica count) read.

    `stall_at_s`: the balancer's event loop blocked for half a second at that time of the
    window, as a busy machine holds it up: the scrapes due then time out (0.2 s), and what
    Prometheus read while they did (its `up`, and the replica count in the middle of the stall)
    comes back too."""
    profiles = default_profiles() | {"chatbot": PROFILE}
    async with replica_servers(PROFILE) as (_, servers), \
            LoadBalancer(profiles, ["chatbot"], sample_interval_s=0.2) as lb, \
            aiohttp.ClientSession() as session:
        lb.services["chatbot"].add("chatbot-0", str(servers[0].make_url("")))
        target = lb.metrics_url.removeprefix("http://")
        async with PrometheusServer(tmp / "prom", [target], scrape_interval_s=0.2) as prom:
            svc = PromService("chatbot", PROFILE.slo_ms, PROFILE.capacity, MESH_NAMESPACE)
            prom_metrics = PrometheusMetrics(prom.url, [svc], step_s=0.2)
            await asyncio.sleep(1.0)  # idle, scraped: the window starts in it
            t0 = time.monotonic()
            tasks = []
            scaled = False
            stalled_at = None  # wall clock, the middle of the stall
            while (now := time.monotonic() - t0) < 2 * half_s:
                if not scaled and now >= half_s:
                    lb.services["chatbot"].add("chatbot-1", str(servers[1].make_url("")))
                    scaled = True
                if stall_at_s is not None and stalled_at is None and now >= stall_at_s:
                    stalled_at = time.time() + 0.25
                    time.sleep(0.5)  # blocking on purpose: the loop held up
                tasks.append(asyncio.create_task(_burst(session, lb.endpoint("chatbot"), 1)))
                await asyncio.sleep(gap_s)
            statuses = [s for batch in await asyncio.gather(*tasks) for s in batch]
            await asyncio.sleep(0.6)  # the last counts scraped
            # from 0.5 s before the first request: the counts' edges fall in idle time
            local = lb.window(time.monotonic() - t0 + 0.5)["chatbot"]
            at = time.time()
            remote = await asyncio.to_thread(prom_metrics.window, "chatbot", local.seconds,
                                             end=at)
            w = f"{round(local.seconds * 1000)}ms"
            sel = 'namespace="local",app="chatbot"'
            old = [await asyncio.to_thread(prom_metrics.query, q, at) for q in (
                _increase(f"testbed_replica_busy_seconds_total{{{sel}}}", w),
                f"avg_over_time(count(envoy_cluster_upstream_rq_active{{{sel}}})[{w}:200ms])")]
            stall = None
            if stalled_at is not None:
                q = WindowQueries.build(svc, 2.0, step_s=0.2)
                stall = {"up_min": await asyncio.to_thread(
                            prom_metrics.query, f"min_over_time(up[{w}])", at),
                         "instances": await asyncio.to_thread(
                            prom_metrics.query, q.instances, stalled_at)}
            return statuses, local, remote, old[0] / (local.seconds * old[1]), stall


@pytest.mark.slow
def test_a_scale_up_mid_window_reads_the_same_utilization_on_both_sources(tmp_path: Path):
    """Utilization is the time mean of the mean over the ready replicas (docs/metrics.md) on both
    sources: through a scale-up from 1 to 2 replicas halfway through the window they agree within
    the cell's bound, where the old query's busy seconds over the mean replica count read lower
    (the time before the scale-up spread over the replica that came later)."""
    statuses, local, remote, old, _ = asyncio.run(_scale_up_mid_window(tmp_path))
    assert set(statuses) == {200}
    assert remote.instances == local.instances == 2
    assert remote.completed == local.completed == len(statuses)
    # about (3.6 + 1.8) busy replica-seconds over 9 s: 0.9 then 0.45, and idle at both edges
    assert 0.5 < local.utilization < 0.8
    assert remote.utilization == pytest.approx(local.utilization, abs=UTILIZATION_ABS / 2)
    assert compare(local, remote).agrees
    print(f"utilization through the scale-up: in-process {local.utilization:.3f}, "
          f"prometheus {remote.utilization:.3f}, the old query {old:.3f}")
    assert local.utilization - old > UTILIZATION_ABS  # what the cell used to read: disagreeing


@pytest.mark.slow
@pytest.mark.parametrize("stall_at_s", [2.0, 6.0])
def test_a_failed_scrape_moves_neither_the_utilization_nor_the_replica_count(
        tmp_path: Path, stall_at_s: float):
    """A busy machine holds the balancer's loop up past the scrape timeout: Prometheus marks its
    series stale until the next good scrape. The query bridges them: the utilization agrees with
    the in-process source (it read 0.74 and 0.89 against 0.55 and 0.58 before, the counter whole
    as one step's increase), and the replica count during the stall is the one before it (it
    read none)."""
    statuses, local, remote, _, stall = asyncio.run(
        _scale_up_mid_window(tmp_path, stall_at_s=stall_at_s))
    assert stall["up_min"] == 0  # a scrape did fail: the case this test is about
    assert set(statuses) == {200}
    assert remote.completed == local.completed == len(statuses)
    assert 0.5 < local.utilization < 0.8
    assert remote.utilization == pytest.approx(local.utilization, abs=UTILIZATION_ABS / 2)
    assert stall["instances"] == (1 if stall_at_s < 4.0 else 2)
    assert remote.instances == local.instances == 2


def test_every_window_query_is_accepted_by_the_real_server(tmp_path: Path):
    """Each query of both profiles' windows, at a short and a long window, sent to a real server
    with no data: Prometheus parses and evaluates it (an empty answer), or says why not."""

    async def main():
        async with LoadBalancer(default_profiles(), ["imgcls"]) as lb, \
                PrometheusServer(tmp_path / "p", [lb.metrics_url.removeprefix("http://")]) as prom:
            m = PrometheusMetrics(prom.url, [])
            out = []
            for svc in (PromService("imgcls", 500, 1, "drafas"), PromService("tts", 2.5, 4, "local")):
                for seconds in (7.6, 30):
                    for name, q in WindowQueries.build(svc, seconds).items():
                        out.append((name, await asyncio.to_thread(m.query, q)))
            return out

    answers = asyncio.run(main())
    # 14 queries a window: utilization is one query (the time mean of the per-replica busy
    # fraction), where it was two (busy seconds, and the mean replica count to divide them by);
    # dropped requests and the p50/p95/p99 latency (histogram_quantile) are four more
    assert len(answers) == 2 * 2 * 14
    assert {v for _, v in answers} <= {None, 0.0}


def test_the_real_server_rejects_an_invalid_query_with_its_reason(tmp_path: Path):
    """The query the lab used to send: an offset after an aggregation."""

    async def main():
        async with LoadBalancer(default_profiles(), ["imgcls"]) as lb, \
                PrometheusServer(tmp_path / "p", [lb.metrics_url.removeprefix("http://")]) as prom:
            m = PrometheusMetrics(prom.url, [])
            return await asyncio.to_thread(
                m.query, "sum(sum by (pod) (envoy_cluster_upstream_rq_active) offset 30s)")

    with pytest.raises(StateError, match="offset modifier must be preceded by"):
        asyncio.run(main())


def test_a_server_that_cannot_start_is_one_line(tmp_path: Path):
    fake = tmp_path / "prometheus"
    fake.write_text("#!/bin/sh\necho 'bad flag' >&2\nexit 3\n")
    fake.chmod(0o755)

    async def main():
        await PrometheusServer(tmp_path / "p", ["127.0.0.1:9"], binary=str(fake)).start()

    with pytest.raises(StateError, match=r"prometheus exited with status 3 at start .*bad flag"):
        asyncio.run(main())
    assert not (tmp_path / "p").exists()


@pytest.mark.slow
def test_the_lab_busy_meter_is_read_by_the_lab_query(tmp_path: Path):
    """The busy meter in front of a replica, scraped by a real Prometheus that adds the pod's labels
    as the lab's relabelling does: the lab's utilization query reads what the meter integrated
    (one replica: its busy seconds over the window), and the series it reads hold the busy
    seconds exactly to the scrape."""
    from testbed.metrics.meter import Meter

    async def main():
        replica = EmulatedReplica("chatbot", PROFILE, seed=1)
        upstream = TestServer(replica.app(), host="127.0.0.1")
        await upstream.start_server()
        meter = Meter(str(upstream.make_url("")), capacity=1)
        front = TestServer(meter.app(), host="127.0.0.1")
        await front.start_server()
        try:
            target = f"127.0.0.1:{front.port}"
            async with PrometheusServer(tmp_path / "prom", [target], scrape_interval_s=0.2,
                                        labels={"namespace": "drafas", "app": "chatbot",
                                                "pod": "chatbot-0"}) as prom, \
                    aiohttp.ClientSession() as session:
                t0 = time.monotonic()
                statuses = await _burst(session, str(front.make_url("")).rstrip("/"), 4)
                await asyncio.sleep(0.3)
                statuses += await _burst(session, str(front.make_url("")).rstrip("/"), 2)
                await asyncio.sleep(0.6)
                span = time.monotonic() - t0  # Prometheus scraped the meter from before t0
                q = WindowQueries.build(PromService("chatbot", PROFILE.slo_ms, 1, "drafas"), span,
                                        step_s=0.2)
                prom_metrics = PrometheusMetrics(prom.url, [])
                read = await asyncio.to_thread(prom_metrics.query, q.utilization)
                busy = await asyncio.to_thread(prom_metrics.query, _increase(
                    'testbed_replica_busy_seconds_total{namespace="drafas",app="chatbot"}',
                    f"{round(span * 1000)}ms"))
                return statuses, read * span, busy, meter.busy.busy_seconds()
        finally:
            await front.close()
            await upstream.close()

    statuses, read, busy, integrated = asyncio.run(main())
    assert statuses == [200] * 6
    assert integrated == pytest.approx(0.6, abs=0.1)  # 6 requests of 100 ms, one at a time
    assert busy == pytest.approx(integrated, abs=0.02)
    # the query's steps cover the ~1.5 s span to within half a step (0.1 s) at its start and a
    # step at its end: the time mean times the span is the busy seconds within that share
    assert read == pytest.approx(integrated, rel=0.15)


def test_a_prometheus_without_the_mesh_series_is_one_line_before_a_run(tmp_path: Path):
    """A reachable Prometheus that has no series for a service (no sidecar or meter scraped)."""

    async def main():
        async with LoadBalancer(default_profiles(), ["imgcls"]) as lb, \
                PrometheusServer(tmp_path / "p", [lb.metrics_url.removeprefix("http://")]) as prom:
            m = PrometheusMetrics(prom.url, [PromService("imgcls", 500, 1, MESH_NAMESPACE)])
            await asyncio.to_thread(m.check_series)

    with pytest.raises(StateError, match=r"^Prometheus at http://127\.0\.0\.1:\d+ has no "
                       r"envoy_cluster_upstream_rq_active series for imgcls \(namespace local\)"):
        asyncio.run(main())
