"""`measure: drafas` from Prometheus (testbed.metrics.drafas): the author's queries in the mesh's
names, answered by a real Prometheus server scraping the local balancer, and what a window
makes of their answers."""

import asyncio
import shutil
import time
from pathlib import Path

import pytest

from testbed.clock import REAL_TIME, ScenarioClock
from testbed.metrics.drafas import DrafasQueries, drafas_window
from testbed.metrics.prometheus import PrometheusMetrics, PromService
from tests.metrics.test_prometheus_server import _burst, scraped_chatbot

ANSWERS = {"requests": 60.0, "within_slo": 45.0, "every": 60.0, "latency_sum_ms": 3000.0,
           "latency_count": 50.0, "in_flight": 1.5}


def test_a_window_is_the_authors_rates_over_running_pods():
    """45 of 60 requests within the SLO (any other code or slower counts): 0.25 violations; 1.5
    requests in flight on average over 3 Running pods of capacity 1: 0.5; the latency of the
    200s, scaled to scenario time; the instances are the pods counted, not the gauges' series."""
    w = drafas_window("imgcls", 30.0, ANSWERS, pods=3, capacity=1, clock=ScenarioClock(2))
    assert (w.arrivals, w.completed, w.violations, w.instances) == (60, 60, 15, 3)
    assert w.utilization == pytest.approx(0.5) and w.mean_latency_ms == pytest.approx(120.0)
    assert w.slo_violation_rate == pytest.approx(0.25)


def test_a_query_that_finds_nothing_reads_zero_as_the_authors_did():
    """No 200 within the SLO series (every request failed): the author's `1 - a/b` has no data,
    which reads 0, not 1; no pod Running: utilization 0."""
    none = {**ANSWERS, "within_slo": None, "latency_count": None, "latency_sum_ms": None}
    w = drafas_window("imgcls", 30.0, none, pods=0, capacity=1, clock=REAL_TIME)
    assert w.violations == 0 and w.utilization == 0.0 and w.mean_latency_ms is None


def test_the_queries_name_the_authors_series_and_the_scaled_window():
    q = DrafasQueries.build(PromService("imgcls", 500, 2, "drafas"), 30 / 16, 1 / 16)
    assert q.in_flight == ('sum(avg_over_time(clamp_max(envoy_http_downstream_rq_active{'
                           'namespace="drafas",app="imgcls",http_conn_manager_prefix=~"inbound_.*"}'
                           ', 2)[1875ms:62ms]))')
    assert 'response_code="200",le=~"500(\\\\.0)?"}[1875ms]' in q.within_slo
    assert 'le="+Inf"}[1875ms]' in q.every and "response_code" not in q.every


@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="no prometheus server on PATH (scripts/setup installs it)")
@pytest.mark.timed
def test_a_real_prometheus_answers_the_drafas_window(tmp_path: Path):
    """Bursts through the balancer to 2 replicas, read back both ways: every request answered
    200, so the two ways count the same requests and violations (increase() extrapolates by a
    few per cent); the drafas utilization is the sampled gauge, near the integral; its instances
    are the Running pods the cluster reports (here 3: one still starting)."""
    async def main():
        async with scraped_chatbot(tmp_path, 0.1) as (lb, session, prom, svc):
            harness = PrometheusMetrics(prom.url, [svc], step_s=0.1)
            drafas = harness.for_services(["chatbot"], reading="drafas", running=lambda s: 3)
            await asyncio.sleep(1.2)
            t0 = time.monotonic()
            statuses = []
            for n in [6, 2, 6, 1, 4, 6, 3]:
                statuses += await _burst(session, lb.endpoint("chatbot"), n)
                await asyncio.sleep(0.25)
            await asyncio.sleep(0.5)
            span = time.monotonic() - t0 + 1.0
            at = time.time()
            h = await asyncio.to_thread(harness.window, "chatbot", span, end=at)
            d = await asyncio.to_thread(drafas.window, "chatbot", span, end=at)
            return statuses, h, d

    statuses, h, d = asyncio.run(main())
    assert statuses == [200] * 28 and h.completed == 28
    assert d.arrivals == pytest.approx(28, rel=0.15) and d.completed == pytest.approx(28, rel=0.15)
    # increase() extrapolates each bucket's series on its own (it stops at the counter's zero), so
    # the ratio of two of them may be one request of the 28 off (1/28 = 0.036), never more
    assert d.slo_violation_rate == pytest.approx(h.slo_violation_rate, abs=0.04)
    assert h.violations > 0  # the queued tails: the two ways agree on something that happened
    assert d.instances == 3 and h.instances == 2
    # sampled in-flight over 3 counted pods, against the integral over the 2 ready ones
    assert d.utilization * 3 / 2 == pytest.approx(h.utilization, abs=0.1)
    assert d.mean_latency_ms == pytest.approx(h.mean_latency_ms, rel=0.1)
