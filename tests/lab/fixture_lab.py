"""A fixture lab: an HTTP server that answers with hand-written Kubernetes API and Prometheus documents.

The fixtures are in tests/lab/fixtures/api (kubernetes.json, prometheus.json; their `_about` says
they were written from the API references, not captured from a live peer). The official
kubernetes client and PrometheusMetrics talk to it over real HTTP; Prometheus queries are parsed
by a real PromQL parser and answered by what they read; the only state kept is each
Deployment's replica count, which a PATCH of the scale subresource changes and later answers
report (`$replicas`). Every request is recorded in
`requests` as (method, path, query or body).
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import promql_parser

FIXTURES = Path(__file__).parent / "fixtures" / "api"


def _fill(doc: Any, values: dict[str, Any]) -> Any:
    if isinstance(doc, dict):
        return {k: _fill(v, values) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_fill(v, values) for v in doc]
    if isinstance(doc, str) and doc.startswith("$") and doc[1:] in values:
        return values[doc[1:]]
    return doc


class FixtureLab:
    def __init__(self, replicas: int = 1, down: bool = False):
        self.kube = json.loads((FIXTURES / "kubernetes.json").read_text())
        self.prom = json.loads((FIXTURES / "prometheus.json").read_text())
        self.replicas = {"imgcls": replicas}
        self.requests: list[tuple[str, str, Any]] = []
        lab = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, doc: Any) -> None:
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                lab.requests.append(("GET", url.path, query))
                code, doc = lab.answer("GET", url.path, query)
                self._send(code, doc)

            def do_PATCH(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                lab.requests.append(("PATCH", url.path, body))
                m = re.fullmatch(r"/apis/apps/v1/namespaces/drafas/deployments/(\w+)/scale",
                                 url.path)
                if not m or m.group(1) not in lab.replicas:
                    self._send(404, {"kind": "Status", "status": "Failure", "code": 404})
                    return
                lab.replicas[m.group(1)] = body["spec"]["replicas"]
                self._send(200, lab.answer("GET", url.path, {})[1])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FixtureLab:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, method: str, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        values = {"replicas": self.replicas["imgcls"],
                  "imgcls_pods": [self.kube["_pod"]] * self.replicas["imgcls"]}
        if path == "/api/v1/status/buildinfo":
            return 200, self.prom["buildinfo"]
        if path == "/api/v1/query":
            return self._query(query["query"][0], values)
        doc = self.kube.get(f"{method} {path}")
        if doc is None:
            return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                         "reason": "NotFound", "code": 404}
        return 200, _fill(doc, values)

    def _query(self, promql: str, values: dict[str, Any]) -> tuple[int, Any]:
        try:
            expr = promql_parser.parse(promql)
        except Exception as exc:  # the parser's own error type; Prometheus answers 400 bad_data
            return 400, {"status": "error", "errorType": "bad_data", "error": str(exc)}
        selectors, windows = _walk(expr)
        names = {s.name for s in selectors} - {"up"}  # up: the failed scrapes' bridge
        seconds = windows[0].total_seconds() if windows else 0.0
        replicas = values["replicas"]
        rates = self.prom["per_second"]
        if isinstance(expr, promql_parser.AggregateExpr) and str(expr.op) == "count":
            value = replicas  # count(...): one series per replica, whichever series it reads
        elif names == {"envoy_cluster_upstream_rq_active"}:
            value = self.prom["in_flight"]  # sum(...): in flight
        elif names == {"envoy_http_downstream_rq_active"}:
            # measure: drafas, sum(avg_over_time(clamp_max(...)[w:step])): the sampled in flight
            value = self.prom["in_flight"]
        elif names == {"testbed_replica_busy_seconds_total"}:
            # avg_over_time((busy per step / replicas / step)[w:step]): the utilization itself
            value = self.prom["utilization"]
        else:
            matchers = {str(m) for s in selectors for m in s.matchers.matchers}
            measure = {"istio_request_duration_milliseconds_bucket": "within_slo",
                       "istio_request_duration_milliseconds_sum": "latency_sum_ms",
                       "istio_request_duration_milliseconds_count": "latency_count"}.get(
                next(iter(names)), "failed" if 'response_code!~"2.."' in matchers else "completed")
            if len(names) != 1 or not seconds:
                return 400, {"status": "error", "errorType": "bad_data",
                             "error": f"fixture lab: no answer for {promql}"}
            value = rates[measure] * seconds
        return 200, {"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {}, "value": [1795000000.0, f"{value:g}"]}]}}


def _walk(expr: Any) -> tuple[list[Any], list[Any]]:
    """The vector selectors a parsed query reads, and its ranges (matrix and subquery), in order."""
    selectors: list[Any] = []
    windows: list[Any] = []

    def visit(e: Any) -> None:
        if isinstance(e, promql_parser.VectorSelector):
            selectors.append(e)
        elif isinstance(e, promql_parser.MatrixSelector):
            windows.append(e.range)
            visit(e.vector_selector)
        elif isinstance(e, promql_parser.SubqueryExpr):
            windows.append(e.range)
            visit(e.expr)
        elif isinstance(e, promql_parser.BinaryExpr):
            visit(e.lhs)
            visit(e.rhs)
        elif isinstance(e, promql_parser.Call):
            for arg in e.args:
                visit(arg)
        elif isinstance(e, (promql_parser.AggregateExpr, promql_parser.ParenExpr)):
            visit(e.expr)
    visit(expr)
    return selectors, windows
