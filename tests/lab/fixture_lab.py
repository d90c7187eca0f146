"""A fixture lab: an HTTP server that answers with hand-written Kubernetes API and Prometheus documents.

The fixtures are in tests/lab/fixtures/api (kubernetes.json, prometheus.json; their `_about` says
they were written from the API references, not captured from a live peer). The official kubernetes client and PrometheusMetrics talk to
it over real HTTP; the only state kept is each Deployment's replica count, which a PATCH of the
scale subresource changes and later answers report (`$replicas`). Every request is recorded in
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
            return 200, self._query(query["query"][0], values)
        doc = self.kube.get(f"{method} {path}")
        if doc is None:
            return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                         "reason": "NotFound", "code": 404}
        return 200, _fill(doc, values)

    def _query(self, promql: str, values: dict[str, Any]) -> Any:
        if 'response_code!~"2.."' in promql:
            return _fill(self.prom["istio_requests_total,failed"], values)
        for key, doc in self.prom.items():
            if key.startswith("_") or key in ("buildinfo", "istio_requests_total,failed"):
                continue
            if key in promql.split("{")[0] + promql[:40]:
                if isinstance(doc, str) and doc.startswith("rate:"):
                    m = re.search(r"\[(\d+)s\]", promql)
                    seconds = int(m.group(1)) if m else 1
                    v = float(doc[5:]) * seconds
                    return {"status": "success", "data": {"resultType": "vector", "result": [
                        {"metric": {}, "value": [1795000000.0, f"{v:g}"]}]}}
                return _fill(doc, values)
        return {"status": "success", "data": {"resultType": "vector", "result": []}}
