"""The Grafana dashboard for a testbed's Prometheus: its panels' PromQL, the JSON, and a check
that each query answers.

Panels: throughput per slice (the HTB counters `testbed.net.netstats` exports), latency
p50/p95/p99 per service and replicas (the mesh's series, `testbed.metrics.mesh`), the share of
requests that violated their SLO (failures plus successes above the SLO bucket, as
`testbed.metrics.prometheus` counts them), and scaling actions (changes of the ready-replica
count). `python -m testbed.metrics.dashboard` rewrites the shipped JSON
(`testbed/metrics/grafana/testbed-dashboard.json`, loaded as docs/lab.md says);
`answers(url)` runs every query against a Prometheus and counts the series each returns (a cell
with `--metrics prometheus` keeps that in its cell.json).
"""

from __future__ import annotations

import json
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from testbed.metrics.promql import le_regex
from testbed.profiles import load_profiles

SHIPPED = Path(__file__).with_name("grafana") / "testbed-dashboard.json"
WINDOW = "1m"  # the rate window of every panel
DATASOURCE = {"type": "prometheus", "uid": "testbed-prometheus"}  # provisioning/datasources
_REQ = 'reporter="destination"'
_ACTIVE = 'envoy_cluster_upstream_rq_active{cluster_name=~"inbound\\\\|.*"}'  # a replica's own


@dataclass(frozen=True)
class Target:
    """One query of a panel, and how Grafana names its series."""

    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    """One panel: its title, unit and queries."""

    title: str
    unit: str
    targets: tuple[Target, ...]
    description: str = ""


def panels() -> list[Panel]:
    """The dashboard's panels, each with its PromQL (SLO buckets from the packaged profiles)."""
    slos = {name: p.slo_ms for name, p in sorted(load_profiles().items())}
    by_svc = "destination_service_name"
    within = " or ".join(
        f'rate(istio_request_duration_milliseconds_bucket{{{_REQ},{by_svc}="{name}",'
        f'response_code=~"2..",le=~"{le_regex(slo)}"}}[{WINDOW}])' for name, slo in slos.items())
    count = f"sum by ({by_svc}) (rate(istio_request_duration_milliseconds_count{{{_REQ}}}[{WINDOW}]))"
    return [
        Panel("Throughput per slice", "Mbit/s", (Target(
            f'sum by (slice, direction) (rate(testbed_htb_transmit_bytes_total{{ue=""}}[{WINDOW}]))'
            " * 8 / 1000000", "{{slice}} {{direction}}"),),
            "Each slice's HTB class on the UPF (uplink on N6, downlink on N3 or the IFB)."),
        Panel("Latency per service", "ms", tuple(
            Target(f"histogram_quantile({q}, sum by (le, {by_svc}) (rate("
                   f"istio_request_duration_milliseconds_bucket{{{_REQ}}}[{WINDOW}])))",
                   f"{{{{{by_svc}}}}} p{round(q * 100)}") for q in (0.5, 0.95, 0.99)),
            "From the duration histogram's buckets: a percentile between two bounds is "
            "interpolated."),
        Panel("Replicas", "short", (Target(f"count by (app) ({_ACTIVE})", "{{app}}"),),
              "Replicas in rotation: each one's inbound in-flight gauge."),
        Panel("SLO violations", "percentunit", (Target(
            f"1 - sum by ({by_svc}) ({within}) / {count}", f"{{{{{by_svc}}}}}"),),
            "Failures plus successes slower than the SLO, over completions ("
            + ", ".join(f"{n} {s:g} ms" for n, s in slos.items()) + ")."),
        Panel("Scaling actions (last 10 min)", "short", (Target(
            f"changes((count by (app) ({_ACTIVE}))[10m:1s])", "{{app}}"),),
            "Changes of each service's replica count: the scaler's actions as they took effect."),
    ]


def dashboard() -> dict:
    """The Grafana dashboard JSON model."""
    out = []
    for i, p in enumerate(panels()):
        out.append({
            "id": i + 1, "type": "timeseries", "title": p.title, "description": p.description,
            "datasource": DATASOURCE,
            "gridPos": {"x": 12 * (i % 2), "y": 8 * (i // 2), "w": 12, "h": 8},
            "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + k), "datasource": DATASOURCE, "expr": t.expr,
                         "legendFormat": t.legend} for k, t in enumerate(p.targets)],
        })
    return {"uid": "testbed", "title": "testbed: slices, services, scaler", "schemaVersion": 39,
            "tags": ["testbed", "5g"], "time": {"from": "now-30m", "to": "now"},
            "refresh": "5s", "panels": out}


def answers(base_url: str, timeout_s: float = 5.0) -> dict[str, int]:
    """Per query (`panel title: legend`), the number of series it returns from the Prometheus at
    `base_url` now (-1: the server refused it)."""
    out = {}
    for p in panels():
        for t in p.targets:
            url = f"{base_url}/api/v1/query?" + urllib.parse.urlencode({"query": t.expr})
            try:
                with urllib.request.urlopen(url, timeout=timeout_s) as resp:
                    doc = json.loads(resp.read())
            except (OSError, ValueError):
                out[f"{p.title}: {t.legend}"] = -1
                continue
            out[f"{p.title}: {t.legend}"] = len(doc.get("data", {}).get("result", []))
    return out


def main() -> int:
    """Rewrite the shipped dashboard JSON from `dashboard()`."""
    SHIPPED.parent.mkdir(parents=True, exist_ok=True)
    SHIPPED.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {SHIPPED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
