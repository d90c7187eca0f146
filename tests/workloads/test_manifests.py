"""The service manifests carry what the lab's metrics backend relies on: an `app` pod label and an
Istio duration histogram with a bucket boundary at each service's SLO threshold."""

import json
from pathlib import Path

import pytest
import yaml

from testbed.profiles import default_profiles

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("service", ["chatbot", "imgcls", "tts"])
def test_pods_have_app_label_and_slo_bucket(service):
    docs = list(yaml.safe_load_all((ROOT / "workloads" / service / "k8s.yaml").read_text()))
    deployment = next(d for d in docs if d and d["kind"] == "Deployment")
    meta = deployment["spec"]["template"]["metadata"]
    assert meta["labels"]["app"] == service
    assert meta["annotations"]["sidecar.istio.io/inject"] == "true"
    buckets = json.loads(meta["annotations"]["sidecar.istio.io/statsHistogramBuckets"])
    bounds = buckets["istiocustom"]
    assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds)
    assert default_profiles()[service].slo_ms in bounds
    assert max(bounds) > 4000, "requests up to the client's 4 s timeout must fall in a finite bucket"
