"""The services' lab manifests, generated from each profile's `deploy:`, carry what the lab relies
on: an `app` pod label and an Istio duration histogram with a bucket boundary at each service's SLO
threshold; and the paper's three carry what their hand-written manifests (removed when the
manifests became generated) held."""

import json

import pytest
import yaml

from testbed.cluster.manifest import manifest_text, service_manifest
from testbed.profiles import default_profiles

PAPER = ["chatbot", "imgcls", "tts"]

# What workloads/<service>/k8s.yaml held before the manifests were generated (commit 3ac32c0):
# image, port, cpu, memory, readiness path, the server's env, the bucket bounds (all kept).
HAND_WRITTEN = {
    "chatbot": ("testbed/chatbot:v1", 11434, "1", "2Gi", "/api/version",
                {"OLLAMA_KEEP_ALIVE": "-1", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
                 "TESTBED_BATCH_SIZE": "1", "OLLAMA_NUM_PARALLEL": "$(TESTBED_BATCH_SIZE)"},
                [50, 100, 250, 500, 1000, 1500, 2000, 2500, 3000, 4000, 5000, 10000, 30000, 60000]),
    "imgcls": ("testbed/imgcls:v1", 8080, "2", "2Gi", "/healthz",
               {"RESNET152_WEIGHTS": "/app/resnet152.pth", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
                "TESTBED_BATCH_SIZE": "1", "TESTBED_IMGCLS_MODE": "overlap"},  # issue 42: its mode
               [10, 25, 50, 100, 150, 200, 250, 300, 400, 500, 750, 1000, 2500, 5000, 10000]),
    "tts": ("testbed/tts:v1", 5002, "2", "2Gi", "/",
            {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "TESTBED_BATCH_SIZE": "1"},
            [50, 100, 250, 500, 1000, 1500, 2000, 2500, 3000, 4000, 5000, 10000, 30000, 60000]),
}


def _docs(service: str) -> tuple[dict, dict]:
    deployment, svc = service_manifest(default_profiles()[service])
    return deployment, svc


@pytest.mark.parametrize("service", PAPER)
def test_pods_have_app_label_and_slo_bucket(service):
    deployment, _ = _docs(service)
    meta = deployment["spec"]["template"]["metadata"]
    assert meta["labels"]["app"] == service
    assert meta["annotations"]["sidecar.istio.io/inject"] == "true"
    buckets = json.loads(meta["annotations"]["sidecar.istio.io/statsHistogramBuckets"])
    bounds = buckets["istiocustom"]
    assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds)
    assert default_profiles()[service].slo_ms in bounds
    assert max(bounds) > 4000, "requests up to the client's 4 s timeout must fall in a finite bucket"


@pytest.mark.parametrize("service", PAPER)
def test_the_generated_manifest_holds_what_the_hand_written_one_did(service):
    image, port, cpu, memory, health, env, old_bounds = HAND_WRITTEN[service]
    deployment, svc = _docs(service)
    for doc in (deployment, svc):
        assert doc["metadata"]["namespace"] == "drafas"
        assert doc["metadata"]["labels"] == {"app.kubernetes.io/name": service,
                                             "app.kubernetes.io/part-of": "testbed"}
    pod = deployment["spec"]["template"]
    server, meter = pod["spec"]["containers"]
    assert (server["name"], server["image"], server["imagePullPolicy"]) == (service, image, "Never")
    assert server["ports"] == [{"name": "http", "containerPort": port}]
    amount = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": 1}
    assert server["resources"] == {"requests": amount, "limits": amount}
    assert server["readinessProbe"] == {"httpGet": {"path": health, "port": "http"},
                                        "periodSeconds": 1, "failureThreshold": 600}
    got_env = [(e["name"], e["value"]) for e in server["env"]]
    assert dict(got_env) == env
    names = [n for n, _ in got_env]
    if "OLLAMA_NUM_PARALLEL" in env:  # $(TESTBED_BATCH_SIZE) resolves only to an earlier entry
        assert names.index("TESTBED_BATCH_SIZE") < names.index("OLLAMA_NUM_PARALLEL")
    assert meter == {
        "name": "meter", "image": "testbed/meter:v1", "imagePullPolicy": "Never",
        "args": ["--listen", "0.0.0.0:8090", "--upstream", f"http://127.0.0.1:{port}",
                 "--capacity", "1"],
        "ports": [{"name": "metered", "containerPort": 8090}],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                      "limits": {"cpu": "500m", "memory": "128Mi"}}}
    assert pod["spec"]["terminationGracePeriodSeconds"] == 60
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": service}}
    notes = pod["metadata"]["annotations"]
    assert {k: v for k, v in notes.items() if k != "sidecar.istio.io/statsHistogramBuckets"} == {
        "sidecar.istio.io/inject": "true", "prometheus.io/scrape": "true",
        "prometheus.io/port": "8090", "prometheus.io/path": "/metrics"}
    bounds = json.loads(notes["sidecar.istio.io/statsHistogramBuckets"])["istiocustom"]
    assert set(old_bounds) <= set(bounds), "every bound the hand-written manifest had is kept"
    assert svc["spec"] == {"type": "NodePort", "selector": {"app.kubernetes.io/name": service},
                           "ports": [{"name": "http", "port": port, "targetPort": "metered"}]}


def test_the_manifest_text_says_it_is_generated_and_parses_back():
    text = manifest_text(default_profiles()["imgcls"])
    assert text.startswith("# imgcls: generated by testbed from the deploy: of its service profile")
    assert [d["kind"] for d in yaml.safe_load_all(text)] == ["Deployment", "Service"]


def test_a_lab_run_records_the_imgcls_server_mode_its_manifest_sets():
    """Issue 42: the mode the manifest gives the pods is the one the server reads, and the lab's
    cell record names it (serial: the dissertation's server; overlap: the default)."""
    import re
    from pathlib import Path

    from testbed.cluster.kubernetes import IMGCLS_MODE_ENV
    from testbed.lab.session import LabService
    from testbed.scenario.lab import server_modes

    server = (Path(__file__).resolve().parents[2] / "workloads" / "imgcls" / "server.py").read_text()
    assert re.search(r'^MODE_ENV = "(\w+)"', server, re.M).group(1) == IMGCLS_MODE_ENV
    env = default_profiles()["imgcls"].deploy.env
    assert env[IMGCLS_MODE_ENV] == "overlap"
    services = [LabService("imgcls", 500, 1, image="testbed/imgcls:v1", env={IMGCLS_MODE_ENV: "serial"}),
                LabService("tts", 2500, 1, image="testbed/tts:v1"),
                LabService("mine", 500, 1, image="testbed/imgcls:v1")]
    assert server_modes(services) == {"imgcls": "serial", "mine": "overlap (the server's default)"}
