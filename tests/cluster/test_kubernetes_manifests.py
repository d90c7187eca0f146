"""The service manifests (generated from each profile's `deploy:`: every registered service's, and a
user's service from its own profile) and every patch KubernetesCluster makes of them, validated
offline against the official Kubernetes OpenAPI schemas of the version the lab's K3s runs
(kubernetes-validate), and held to the NVIDIA device plugin's MPS rule: no pod requests more than
one nvidia.com/gpu.

A patch is partial, so what is validated is the Deployment (or Scale) that the patch makes of the
manifest's object, merged the way the API server merges a strategic merge patch: containers and
env entries by `name`, maps key by key, anything else replaced.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

client = pytest.importorskip("kubernetes.client", reason="the lab extra (kubernetes) is not installed")
kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")

from testbed.cluster.base import ServiceTarget  # noqa: E402
from testbed.cluster.kubernetes import (  # noqa: E402
    GPU_RESOURCE,
    KubeApis,
    KubernetesCluster,
    KubeService,
)
from testbed.cluster.manifest import service_manifest  # noqa: E402
from testbed.profiles import DeploySpec, ServiceProfile, default_profiles  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# a service of a user's own (not in the registry), as its profile file would give it
ASR = ServiceProfile(name="asr", capacity=2, queue_limit=4, proc_time_ms=(100, 300), startup_ms=5000,
                     slo_ms=800, units=1, deploy=DeploySpec(image="example/asr:1", port=8080))
CPU_ONLY = ASR.replace(name="asr-cpu", deploy=DeploySpec(image="example/asr:1", port=8080, gpu=False,
                                                         command=["asr-server", "--port", "8080"],
                                                         env={"MODEL": "small"}, cpu="500m",
                                                         memory="1Gi"))
MANIFESTS = {**{name: service_manifest(p) for name, p in default_profiles().items() if p.deploy},
             "asr": service_manifest(ASR)}
MERGE_BY_NAME = {"containers", "initContainers", "env"}  # patchMergeKey "name" in the API


def _k8s_version() -> str:
    """The Kubernetes minor of the K3s the playbooks pin (k3s_server_version: v1.31.4+k3s1)."""
    defaults = yaml.safe_load((ROOT / "playbooks/roles/k3s_server/defaults/main.yml").read_text())
    m = re.fullmatch(r"v(\d+)\.(\d+)\.\d+\+k3s\d+", defaults["k3s_server_version"])
    assert m, defaults["k3s_server_version"]
    return f"{m.group(1)}.{m.group(2)}"


def _validate(doc: dict, where: str) -> None:
    try:
        kv.validate(doc, _k8s_version(), strict=True)
    except kv.ValidationError as exc:
        pytest.fail(f"{where}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}: {exc.message}")


def _deployments() -> list[tuple[str, dict]]:
    return [(name, d) for name, docs in MANIFESTS.items() for d in docs if d["kind"] == "Deployment"]


def merge(base: Any, patch: Any, key: str = "") -> Any:
    """`patch` applied to `base` as a strategic merge patch of the fields KubernetesCluster sets."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = merge(base[k], v, k) if k in base else copy.deepcopy(v)
        return out
    if key in MERGE_BY_NAME and isinstance(base, list) and isinstance(patch, list):
        out_list = [copy.deepcopy(b) for b in base]
        for item in patch:
            at = next((i for i, b in enumerate(out_list) if b["name"] == item["name"]), None)
            if at is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[at] = merge(out_list[at], item)
        return out_list
    return copy.deepcopy(patch)


def test_merge_follows_the_strategic_merge_rules_it_claims() -> None:
    base = {"spec": {"replicas": 1, "containers": [{"name": "a", "image": "i", "env": [
        {"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}], "args": ["p", "q"]}}
    patch = {"spec": {"replicas": 3, "containers": [{"name": "a", "env": [
        {"name": "Y", "value": "5"}, {"name": "Z", "value": "6"}]}], "args": ["r"]}}
    env = [{"name": "X", "value": "1"}, {"name": "Y", "value": "5"}, {"name": "Z", "value": "6"}]
    assert merge(base, patch) == {"spec": {"replicas": 3, "containers": [
        {"name": "a", "image": "i", "env": env}], "args": ["r"]}}


def _as_served(doc: Any, key: str = "") -> Any:
    """The object as the API server answers it: resource quantities as strings ("1", not 1)."""
    if isinstance(doc, dict):
        if key in ("requests", "limits"):
            return {k: str(v) for k, v in doc.items()}
        return {k: _as_served(v, k) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_as_served(v) for v in doc]
    return doc


class ManifestAppsApi:
    """Fake AppsV1Api serving one manifest's Deployment through the official client's models;
    applies and records every patch the backend sends."""

    def __init__(self, deployment: dict):
        self.doc = copy.deepcopy(deployment)
        self.patches: list[tuple[str, dict]] = []
        self._api = client.ApiClient()

    def _model(self, doc: dict, kind: str) -> Any:
        return self._api.deserialize(json.dumps(_as_served(doc)), kind, "application/json")

    def read_namespaced_deployment(self, name: str, namespace: str) -> Any:
        return self._model(self.doc, "V1Deployment")

    def read_namespaced_deployment_status(self, name: str, namespace: str) -> Any:
        return self._model(self.doc, "V1Deployment")

    def _scale(self, namespace: str) -> dict:
        return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": self.doc["metadata"]["name"], "namespace": namespace},
                "spec": {"replicas": self.doc["spec"].get("replicas", 1)}}

    def read_namespaced_deployment_scale(self, name: str, namespace: str) -> Any:
        return self._model(self._scale(namespace), "V1Scale")

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: dict) -> Any:
        scale = merge(self._scale(namespace), body)
        self.patches.append(("Scale", scale))
        self.doc["spec"]["replicas"] = scale["spec"]["replicas"]
        return self._model(scale, "V1Scale")

    def patch_namespaced_deployment(self, name: str, namespace: str, body: dict) -> Any:
        self.doc = merge(self.doc, body)
        self.patches.append(("Deployment", copy.deepcopy(self.doc)))
        return self._model(self.doc, "V1Deployment")


class EmptyCoreApi:
    """Fake CoreV1Api: two nodes of 4 MPS units each, no other pods."""

    def list_node(self) -> Any:
        return client.V1NodeList(items=[client.V1Node(
            metadata=client.V1ObjectMeta(name=n), status=client.V1NodeStatus(
                allocatable={GPU_RESOURCE: "4"})) for n in ("gpu1", "gpu2")])

    def list_pod_for_all_namespaces(self, field_selector: str | None = None) -> Any:
        return client.V1PodList(items=[])


def _gpu_requests(pod_spec: dict) -> list[int]:
    return [int(c.get("resources", {}).get(kind, {}).get(GPU_RESOURCE, 0))
            for key in ("containers", "initContainers") for c in pod_spec.get(key) or []
            for kind in ("requests", "limits")]


def test_the_paper_services_and_a_users_have_generated_manifests() -> None:
    assert {"chatbot", "imgcls", "tts", "asr"} <= set(MANIFESTS)


@pytest.mark.parametrize("name", MANIFESTS)
def test_every_manifest_matches_the_schema_and_asks_at_most_one_gpu_unit(name: str) -> None:
    docs = MANIFESTS[name]
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    for doc in docs:
        _validate(doc, f"the manifest of {name}")
        assert doc["metadata"]["namespace"] == "drafas"
        if doc["kind"] == "Deployment":
            assert max(_gpu_requests(doc["spec"]["template"]["spec"])) == 1, name


def test_a_users_service_gets_its_image_port_and_a_gpu_share() -> None:
    deployment, service = MANIFESTS["asr"]
    server, meter = deployment["spec"]["template"]["spec"]["containers"]
    assert (server["image"], server["imagePullPolicy"]) == ("example/asr:1", "IfNotPresent")
    assert server["ports"] == [{"name": "http", "containerPort": 8080}]
    assert server["resources"]["limits"] == {"cpu": "1", "memory": "2Gi", GPU_RESOURCE: 1}
    assert server["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert meter["args"][-3:] == ["http://127.0.0.1:8080", "--capacity", "2"]
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "metered"}]
    buckets = deployment["spec"]["template"]["metadata"]["annotations"][
        "sidecar.istio.io/statsHistogramBuckets"]
    assert 800 in json.loads(buckets)["istiocustom"]


def test_a_service_without_a_gpu_asks_for_none_and_runs_its_command() -> None:
    deployment, service = service_manifest(CPU_ONLY, "lab-ns")
    for doc in (deployment, service):
        _validate(doc, "the manifest of asr-cpu")
        assert doc["metadata"]["namespace"] == "lab-ns"
    server = deployment["spec"]["template"]["spec"]["containers"][0]
    assert _gpu_requests(deployment["spec"]["template"]["spec"]) == [0, 0, 0, 0]
    assert server["command"] == ["asr-server", "--port", "8080"]
    assert server["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    assert [e["name"] for e in server["env"]] == ["TESTBED_BATCH_SIZE", "MODEL"]


def test_more_than_one_gpu_unit_per_pod_is_refused_naming_the_field() -> None:
    from testbed.errors import ConfigError

    with pytest.raises(ConfigError, match=r"services\.asr\.units: 2 nvidia.com/gpu units per pod"):
        service_manifest(ASR.replace(units=2))


TARGETS = [ServiceTarget(3, 25.0, 1), ServiceTarget(2, 15.0, 4), ServiceTarget(4, 50.0, 8),
           ServiceTarget(1, 100.0, 2), ServiceTarget(2, 35.0, 3)]


@pytest.mark.parametrize("path, deployment", _deployments(), ids=[n for n, _ in _deployments()])
def test_every_patch_of_a_manifest_deployment_is_a_valid_object_with_one_gpu_unit(
        path: str, deployment: dict) -> None:
    apps = ManifestAppsApi(deployment)
    name = deployment["metadata"]["name"]
    cluster = KubernetesCluster([KubeService(name)], "drafas", apis=KubeApis(apps, EmptyCoreApi()))
    cluster.scale(name, 2)
    for target in TARGETS:
        applied = cluster.configure(name, target)
        assert applied.share_pct == min(target.share_pct, 25.0)
    cluster.scale(name, 0)
    kinds = [kind for kind, _ in apps.patches]
    assert kinds.count("Deployment") == 4 and kinds.count("Scale") == 3  # 25 % batch 1: a scale
    for kind, obj in apps.patches:
        _validate(obj, f"the manifest of {path} after a {kind} patch")
        if kind == "Deployment":
            pod = obj["spec"]["template"]["spec"]
            assert max(_gpu_requests(pod)) == 1
            env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
            assert float(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) <= 25.0
    assert cluster.units_per_replica(name) == 1
