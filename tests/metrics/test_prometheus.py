"""PrometheusMetrics: the PromQL it sends and how it reads the HTTP API's documented answers."""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import promql_parser
import pytest

from testbed.errors import MissingRequirement, StateError
from testbed.metrics.prometheus import PrometheusMetrics, PromService, WindowQueries, parse_response

# Shapes as documented at https://prometheus.io/docs/prometheus/latest/querying/api/
VECTOR = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"pod": "resnet-7d9c-abcde"}, "value": [1735689600.0, "1.5"]},
    {"metric": {"pod": "resnet-7d9c-fghij"}, "value": [1735689600.0, "2"]}]}}
EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}
SCALAR = {"status": "success", "data": {"resultType": "scalar", "result": [1735689600.0, "42"]}}
MATRIX = {"status": "success", "data": {"resultType": "matrix", "result": [
    {"metric": {"pod": "a"}, "values": [[1735689570, "1"], [1735689600, "3"]]}]}}
NAN = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {}, "value": [1735689600.0, "NaN"]}]}}
ERROR = {"status": "error", "errorType": "bad_data",
         "error": 'invalid parameter "query": 1:6: parse error: unexpected "}"'}


def test_parse_documented_shapes() -> None:
    assert parse_response(json.dumps(VECTOR)) == 3.5
    assert parse_response(json.dumps(EMPTY)) is None
    assert parse_response(json.dumps(SCALAR)) == 42
    assert parse_response(json.dumps(MATRIX)) == 3
    assert parse_response(json.dumps(NAN)) is None
    with pytest.raises(StateError, match="bad_data: invalid parameter"):
        parse_response(json.dumps(ERROR), "sum(x")
    with pytest.raises(StateError, match="not JSON"):
        parse_response(b"<html>502 Bad Gateway</html>")


def _selectors(expr) -> list:
    """The vector selectors of a parsed query, walking the real parser's tree."""
    out = []
    for attr in ("lhs", "rhs", "expr", "vector_selector"):
        child = getattr(expr, attr, None)
        if child is not None:
            out += _selectors(child)
    for arg in getattr(expr, "args", None) or []:
        out += _selectors(arg)
    if isinstance(expr, promql_parser.VectorSelector):
        out.append(expr)
    return out


@pytest.mark.parametrize("seconds", [7.6, 30, 3600])
def test_every_query_parses_and_reads_the_mesh_series(seconds: float) -> None:
    svc = PromService("resnet", slo_ms=1000, capacity=4)
    q = WindowQueries.build(svc, seconds)
    names = {}
    for field, promql in q.items():
        expr = promql_parser.parse(promql)  # raises on what Prometheus would reject
        sel = _selectors(expr)
        assert sel, field
        # `up`, unscoped, only says which targets' scrapes failed: joined on (job, instance)
        # to the service's own series, it adds none of another service's
        names[field] = {s.name for s in sel} - {"up"}
        for s in sel:  # every selector of the mesh's series is scoped to this service
            if s.name == "up":
                assert "and on(job, instance) (min_over_time(up[" in promql, field
                continue
            text = str(s.matchers)
            assert 'destination_service_name="resnet"' in text or 'app="resnet"' in text, (field, text)
    assert names["completed"] == names["failed"] == {"istio_requests_total"}
    assert names["within_slo"] == {"istio_request_duration_milliseconds_bucket"}
    assert names["utilization"] == {"testbed_replica_busy_seconds_total"}
    assert names["in_flight_before"] == names["instances"] == {"envoy_cluster_upstream_rq_active"}
    assert r'le=~"1000(\\.0)?"' in q.within_slo
    assert 'response_code!~"2.."' in q.failed and "response_code" not in q.latency_sum_ms


def test_the_old_offset_after_an_aggregation_does_not_parse() -> None:
    """What the lab sent before (Prometheus answered 400): the parser catches it without a server."""
    with pytest.raises(Exception, match="offset modifier must be preceded by"):
        promql_parser.parse("sum(sum by (pod) (envoy_cluster_upstream_rq_active{app=\"x\"}) offset 30s)")


def test_slo_bucket_and_labels_follow_the_service() -> None:
    q2 = WindowQueries.build(PromService("tts", slo_ms=2.5, app="coqui", namespace="ai"), 7.6)
    assert r'le=~"2\\.5(\\.0)?"' in q2.within_slo
    # the utilization's steps each read the step before: its range is half a step shorter
    assert "[7600ms]" in q2.completed and "[7100ms:1000ms]" in q2.utilization
    assert 'app="coqui"' in q2.instances and 'namespace="ai"' in q2.instances
    with pytest.raises(ValueError, match="capacity"):
        PromService("x", slo_ms=100, capacity=0)


def _answers(values: dict[str, str | None]) -> dict[str, bytes]:
    q = WindowQueries.build(PromService("resnet", slo_ms=1000, capacity=2), 30)
    out = {}
    for name, promql in q.items():
        value = values.get(name)
        result = [] if value is None else [{"metric": {}, "value": [1735689600.0, value]}]
        out[promql] = json.dumps({"status": "success",
                                  "data": {"resultType": "vector", "result": result}}).encode()
    return out


def test_window_combines_the_answers() -> None:
    answers = _answers({"completed": "59.8", "failed": "2", "within_slo": "50.2",
                        "latency_sum_ms": "29000", "latency_count": "58", "utilization": "0.6",
                        "in_flight_now": "3", "in_flight_before": "1",
                        "instances": "2", "waiting": "4"})
    urls: list[str] = []

    def fetch(url: str, timeout_s: float) -> bytes:
        urls.append(url)
        params = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        assert params["time"] == ["1735689600.000"]
        return answers[params["query"][0]]

    prom = PrometheusMetrics("http://prom:9090/", [PromService("resnet", 1000, 2)], fetch=fetch)
    w = prom.window("resnet", 30, end=1735689600.0)
    assert all(u.startswith("http://prom:9090/api/v1/query?") for u in urls)
    assert (w.completed, w.arrivals, w.instances) == (60, 62, 2)
    assert w.violations == 2 + (58 - 50)  # failures + successes slower than the SLO
    assert w.utilization == pytest.approx(0.6)  # the query's time mean, as it comes
    assert w.mean_proc_time_ms == pytest.approx(500.0)
    assert w.slo_violation_rate == pytest.approx(10 / 60)
    assert w.queue_length == 4  # requests beyond the replicas' capacity at the window's end


def test_queue_length_is_the_in_flight_gauge_beyond_capacity() -> None:
    q = WindowQueries.build(PromService("tts", slo_ms=2000, capacity=4, namespace="ai"), 30)
    assert q.waiting.startswith("sum(clamp_min((envoy_cluster_upstream_rq_active{")
    assert q.waiting.endswith(") - 4, 0))") and 'namespace="ai"' in q.waiting


def test_idle_service_gives_zeros_not_errors() -> None:
    answers = _answers({})

    def fetch(url: str, timeout_s: float) -> bytes:
        return answers[urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["query"][0]]

    w = PrometheusMetrics("http://p", [PromService("resnet", 1000, 2)], fetch=fetch).window("resnet", 30)
    assert (w.arrivals, w.completed, w.violations, w.instances, w.utilization) == (0, 0, 0, 0, 0.0)
    assert w.mean_proc_time_ms is None
    with pytest.raises(StateError, match="no metrics configured for service 'chatbot'"):
        PrometheusMetrics("http://p", [PromService("resnet", 1000)], fetch=fetch).window("chatbot", 30)


class _FakePromApi(BaseHTTPRequestHandler):
    """A fake that answers every query with Prometheus's 400 error document (real answers come
    from a real server: tests/metrics/test_prometheus_server.py)."""

    def do_GET(self) -> None:
        data = json.dumps(ERROR).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def test_error_status_and_unreachable_over_real_http() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakePromApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        prom = PrometheusMetrics(f"http://127.0.0.1:{server.server_address[1]}",
                                 [PromService("resnet", 1000)])
        with pytest.raises(StateError, match="bad_data"):
            prom.query("sum(x")  # a 400 answer still carries Prometheus's error document
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(MissingRequirement, match="unreachable"):
        PrometheusMetrics(f"http://127.0.0.1:{server.server_address[1]}", [],
                          timeout_s=2).query("up")
