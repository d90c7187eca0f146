"""KubernetesCluster: request bodies and accounting against a fake API; a real cluster if KUBECONFIG."""

from __future__ import annotations

import os

import pytest

client = pytest.importorskip("kubernetes.client", reason="the lab extra (kubernetes) is not installed")
ApiException = pytest.importorskip("kubernetes.client.rest").ApiException

from testbed.clock import PollClock  # noqa: E402
from testbed.cluster import ClusterBackend  # noqa: E402
from testbed.cluster.kubernetes import (  # noqa: E402
    KubeApis,
    KubernetesCluster,
    KubeService,
    parse_quantity,
    pod_units,
)
from testbed.errors import ConfigError, MissingRequirement, StateError  # noqa: E402


def _pod_spec(gpu_per_container: list[str | None], init_gpu: str | None = None) -> client.V1PodSpec:
    def container(name: str, gpu: str | None) -> client.V1Container:
        limits = {"cpu": "2", "memory": "4Gi"}
        if gpu is not None:
            limits["nvidia.com/gpu"] = gpu
        return client.V1Container(name=name, image="x", resources=client.V1ResourceRequirements(
            limits=limits))

    init = [container("init", init_gpu)] if init_gpu is not None else None
    return client.V1PodSpec(containers=[container(f"c{i}", g) for i, g in enumerate(gpu_per_container)],
                            init_containers=init)


class FakeAppsApi:
    """Stands in for kubernetes.client.AppsV1Api: records calls, keeps one replica count per Deployment."""

    def __init__(self, deployments: dict[str, tuple[int, int, int]]):
        # name -> (desired, ready, gpu units per pod)
        self.state = {k: list(v) for k, v in deployments.items()}
        self.env: dict[str, dict[str, str]] = {}  # name -> the pod template's env
        self.calls: list[tuple[str, str, str, object]] = []

    def _get(self, name: str, namespace: str) -> list[int]:
        if name not in self.state:
            raise ApiException(status=404, reason="Not Found")
        return self.state[name]

    def read_namespaced_deployment_scale(self, name: str, namespace: str) -> client.V1Scale:
        self.calls.append(("read_scale", name, namespace, None))
        desired, ready, _ = self._get(name, namespace)
        return client.V1Scale(metadata=client.V1ObjectMeta(name=name, namespace=namespace),
                              spec=client.V1ScaleSpec(replicas=desired),
                              status=client.V1ScaleStatus(replicas=ready))

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: object) -> client.V1Scale:
        self.calls.append(("patch_scale", name, namespace, body))
        self._get(name, namespace)[0] = body["spec"]["replicas"]  # type: ignore[index]
        return self.read_namespaced_deployment_scale(name, namespace)

    def read_namespaced_deployment_status(self, name: str, namespace: str) -> client.V1Deployment:
        self.calls.append(("read_status", name, namespace, None))
        return self._deployment(name, namespace)

    def read_namespaced_deployment(self, name: str, namespace: str) -> client.V1Deployment:
        self.calls.append(("read", name, namespace, None))
        return self._deployment(name, namespace)

    def _deployment(self, name: str, namespace: str) -> client.V1Deployment:
        desired, ready, units = self._get(name, namespace)
        spec = _pod_spec([str(units)])
        spec.containers[0].env = [client.V1EnvVar(name=k, value=v)
                                  for k, v in self.env.get(name, {}).items()]
        return client.V1Deployment(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            spec=client.V1DeploymentSpec(
                replicas=desired, selector=client.V1LabelSelector(match_labels={"app": name}),
                template=client.V1PodTemplateSpec(spec=spec)),
            status=client.V1DeploymentStatus(replicas=desired, ready_replicas=ready or None))


class FakeCoreApi:
    """Stands in for kubernetes.client.CoreV1Api: fixed nodes, pods and Services."""

    def __init__(self, node_units: dict[str, str | None], pod_units: list[int]):
        self.node_units = node_units
        self.pod_units = pod_units
        self.field_selectors: list[str | None] = []
        self.running: dict[str, int] = {}  # label selector -> pods in phase Running

    def list_node(self) -> client.V1NodeList:
        items = []
        for name, units in self.node_units.items():
            alloc = {"cpu": "16", "memory": "64Gi"}
            if units is not None:
                alloc["nvidia.com/gpu"] = units
            items.append(client.V1Node(metadata=client.V1ObjectMeta(name=name),
                                       status=client.V1NodeStatus(allocatable=alloc)))
        return client.V1NodeList(items=items)

    def list_pod_for_all_namespaces(self, field_selector: str | None = None) -> client.V1PodList:
        self.field_selectors.append(field_selector)
        return client.V1PodList(items=[client.V1Pod(spec=_pod_spec([str(u)])) for u in self.pod_units])

    def list_namespaced_pod(self, namespace: str, label_selector: str = "",
                            field_selector: str = "") -> client.V1PodList:
        """`running` pods per label selector, as the API server filters them by phase."""
        self.pod_queries = [*getattr(self, "pod_queries", []), (namespace, label_selector,
                                                                 field_selector)]
        n = self.running.get(label_selector, 0) if field_selector == "status.phase=Running" else 0
        return client.V1PodList(items=[client.V1Pod() for _ in range(n)])

    def read_namespaced_service(self, name: str, namespace: str) -> client.V1Service:
        return client.V1Service(metadata=client.V1ObjectMeta(name=name, namespace=namespace),
                                spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=8080)]))


def _cluster(apps: FakeAppsApi, core: FakeCoreApi, **kw: object) -> KubernetesCluster:
    services = [KubeService("chatbot", deployment="chatbot-ollama"), KubeService("resnet"),
                KubeService("tts", units_per_replica=1, endpoint="http://10.0.0.5:31080/")]
    return KubernetesCluster(services, "drafas", apis=KubeApis(apps, core), **kw)  # type: ignore[arg-type]


def test_quantities() -> None:
    assert parse_quantity("4") == 4
    assert parse_quantity("500m") == 0.5
    assert parse_quantity("2Ki") == 2048
    assert parse_quantity(None) == 0
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity("four")


def test_pod_units_uses_limits_and_init_max() -> None:
    assert pod_units(_pod_spec(["1", "1"])) == 2
    assert pod_units(_pod_spec(["1", None], init_gpu="3")) == 3
    assert pod_units(_pod_spec([None])) == 0


def test_scale_patches_the_scale_subresource_with_replicas_only() -> None:
    apps = FakeAppsApi({"chatbot-ollama": (1, 1, 1), "resnet": (1, 1, 1), "tts": (1, 1, 1)})
    core = FakeCoreApi({"gpu1": "4", "gpu2": "4", "cpu1": None}, [1, 1, 1])
    cluster = _cluster(apps, core)
    assert isinstance(cluster, ClusterBackend)
    cluster.scale("chatbot", 3)
    patches = [c for c in apps.calls if c[0] == "patch_scale"]
    assert patches == [("patch_scale", "chatbot-ollama", "drafas", {"spec": {"replicas": 3}})]
    assert cluster.desired_replicas("chatbot") == 3


def test_units_come_from_node_allocatable_and_live_pod_requests() -> None:
    apps = FakeAppsApi({"chatbot-ollama": (1, 1, 1), "resnet": (2, 2, 1), "tts": (1, 1, 1)})
    core = FakeCoreApi({"gpu1": "4", "gpu2": "4", "cpu1": None}, [1, 1, 1, 2])  # 2: not ours
    cluster = _cluster(apps, core)
    assert cluster.total_units() == 8
    assert cluster.free_units() == 3
    assert cluster.gpu_nodes() == {"gpu1": 4, "gpu2": 4}
    assert core.field_selectors[-1] == "status.phase!=Succeeded,status.phase!=Failed"
    assert cluster.units_per_replica("resnet") == 1  # from the pod template
    assert cluster.units_per_replica("tts") == 1  # configured, no API call
    assert ("read", "tts", "drafas", None) not in apps.calls


def test_scale_up_beyond_free_units_is_refused_without_patching() -> None:
    apps = FakeAppsApi({"chatbot-ollama": (1, 1, 1), "resnet": (1, 1, 1), "tts": (1, 1, 1)})
    core = FakeCoreApi({"gpu1": "4"}, [1, 1, 1, 1])
    cluster = _cluster(apps, core)
    with pytest.raises(StateError, match=r"needs 1 nvidia.com/gpu units, 0 free"):
        cluster.scale("tts", 2)
    assert not [c for c in apps.calls if c[0] == "patch_scale"]
    cluster.scale("tts", 0)  # scaling down never needs free units
    assert apps.state["tts"][0] == 0


def test_ready_replicas_and_wait_ready_timeout() -> None:
    apps = FakeAppsApi({"chatbot-ollama": (3, 1, 1), "resnet": (0, 0, 1), "tts": (1, 1, 1)})
    core = FakeCoreApi({"gpu1": "4"}, [])
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s
        apps.state["chatbot-ollama"][1] = min(apps.state["chatbot-ollama"][1] + 1, 2)

    cluster = _cluster(apps, core, clock=PollClock(lambda: now[0], sleep))
    assert cluster.ready_replicas("resnet") == 0  # status.readyReplicas absent means 0
    assert cluster.wait_ready("chatbot", 2, timeout_s=10, poll_s=1) == 2
    with pytest.raises(StateError, match=r"chatbot: 2/3 replicas ready after 10 s"):
        cluster.wait_ready("chatbot", timeout_s=10, poll_s=1)


def test_endpoints_and_errors() -> None:
    apps = FakeAppsApi({"resnet": (1, 1, 1)})
    cluster = _cluster(apps, FakeCoreApi({}, []))
    assert cluster.endpoint("tts") == "http://10.0.0.5:31080"
    assert cluster.endpoint("resnet") == "http://resnet.drafas.svc.cluster.local:8080"
    with pytest.raises(StateError, match=r"'chatbot-ollama' in namespace 'drafas': not found"):
        cluster.desired_replicas("chatbot")
    with pytest.raises(Exception, match="unknown service 'nope'"):
        cluster.scale("nope", 1)


def test_forbidden_is_a_missing_requirement() -> None:
    class ForbiddenAppsApi(FakeAppsApi):
        def read_namespaced_deployment_scale(self, name: str, namespace: str) -> client.V1Scale:
            raise ApiException(status=403, reason="Forbidden")

    cluster = _cluster(ForbiddenAppsApi({}), FakeCoreApi({}, []))
    with pytest.raises(MissingRequirement, match="403 Forbidden"):
        cluster.desired_replicas("resnet")


def _real_cluster_or_skip() -> tuple[object, object]:
    if not os.environ.get("KUBECONFIG"):
        pytest.skip("KUBECONFIG is not set: no real API server to test against")
    from kubernetes import config

    config.load_kube_config()
    core = client.CoreV1Api()
    try:
        core.list_namespace(limit=1, _request_timeout=5)
    except Exception as exc:
        pytest.skip(f"the API server in KUBECONFIG is unreachable: {exc}")
    return client.AppsV1Api(), core


def test_real_api_server_scale_roundtrip() -> None:
    apps, core = _real_cluster_or_skip()
    ns = f"tb-test-{os.getpid()}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))  # type: ignore[attr-defined]
    try:
        labels = {"app": "tb-pause"}
        dep = client.V1Deployment(
            metadata=client.V1ObjectMeta(name="tb-pause"),
            spec=client.V1DeploymentSpec(
                replicas=0, selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(containers=[client.V1Container(
                        name="pause", image="registry.k8s.io/pause:3.9")]))))
        apps.create_namespaced_deployment(ns, dep)  # type: ignore[attr-defined]
        cluster = KubernetesCluster.connect([KubeService("pause", deployment="tb-pause",
                                                         units_per_replica=0)], ns)
        assert cluster.desired_replicas("pause") == 0
        cluster.scale("pause", 1)
        assert cluster.desired_replicas("pause") == 1
        assert cluster.wait_ready("pause", timeout_s=120) == 1
        # the nodes' allocatable GPU shares as the API server reports them, read here apart
        nodes = core.list_node().items  # type: ignore[attr-defined]
        allocatable = sum(int((n.status.allocatable or {}).get(cluster.resource, "0"))
                          for n in nodes if n.status is not None)
        assert cluster.total_units() == allocatable
    finally:
        core.delete_namespace(ns)  # type: ignore[attr-defined]


def test_configure_sets_share_and_batch_in_the_pod_template_with_one_unit_per_pod() -> None:
    from testbed.cluster.base import GpuClusterBackend, ServiceTarget

    apps = FakeAppsApi({"chatbot-ollama": (1, 1, 1), "resnet": (1, 1, 1), "tts": (1, 1, 1)})
    patched: list[object] = []
    apps.patch_namespaced_deployment = lambda name, ns, body: patched.append((name, body))  # type: ignore[attr-defined]
    core = FakeCoreApi({"gpu1": "4", "gpu2": "4"}, [1, 1, 1])
    cluster = _cluster(apps, core)
    assert isinstance(cluster, GpuClusterBackend)
    assert cluster.target("resnet") == ServiceTarget(1, 25.0, 1)
    assert cluster.gpu_free_pct() == [100.0, 25.0]  # 8 units, 3 held by the pods
    applied = cluster.configure("resnet", ServiceTarget(2, 15.0, 8))
    assert applied == ServiceTarget(2, 15.0, 8)
    ((name, body),) = patched
    (container,) = body["spec"]["template"]["spec"]["containers"]  # type: ignore[index]
    assert name == "resnet" and body["spec"]["replicas"] == 2  # type: ignore[index]
    assert {"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "15"} in container["env"]
    assert {"name": "TESTBED_BATCH_SIZE", "value": "8"} in container["env"]
    assert container["resources"] == {"requests": {"nvidia.com/gpu": "1"},
                                      "limits": {"nvidia.com/gpu": "1"}}
    assert cluster.units_per_replica("resnet") == 1


@pytest.mark.parametrize("share", [5.0, 25.0, 26.0, 35.0, 50.0, 75.0, 100.0])
def test_every_configure_patch_requests_one_unit_and_applies_at_most_the_mps_cap(share: float) -> None:
    """The device plugin's rule (internal/rm/rm.go ValidateRequest, MPS: "maximum request size for
    shared resources is 1"): a pod asks for one nvidia.com/gpu, whatever its share. Its MPS control
    daemon caps every client at 100 / replicas %, and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE can only
    lower that, so a larger share is applied (and reported) as the cap."""
    from testbed.cluster.base import ServiceTarget

    apps = FakeAppsApi({"chatbot-ollama": (1, 1, 1), "resnet": (1, 1, 1), "tts": (1, 1, 1)})
    patched: list[dict] = []

    def patch(name: str, ns: str, body: dict) -> None:
        patched.append(body)
        apps.state[name][0] = body["spec"]["replicas"]
        (container,) = body["spec"]["template"]["spec"]["containers"]
        apps.env[name] = {e["name"]: e["value"] for e in container["env"]}

    apps.patch_namespaced_deployment = patch  # type: ignore[attr-defined]
    cluster = _cluster(apps, FakeCoreApi({"gpu1": "4", "gpu2": "4"}, [1, 1, 1]), max_units=8)
    applied = cluster.configure("resnet", ServiceTarget(3, share, 2))
    (body,) = patched
    (container,) = body["spec"]["template"]["spec"]["containers"]
    for kind in ("requests", "limits"):
        assert int(container["resources"][kind]["nvidia.com/gpu"]) == 1
    env = {e["name"]: e["value"] for e in container["env"]}
    assert float(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) == min(share, 25.0)
    assert applied == ServiceTarget(3, min(share, 25.0), 2)
    assert cluster.free_units() == 8 - 3 - 2  # three pods of one unit, beside the other two
    assert cluster.share_used_pct("resnet") == 3 * min(share, 25.0)


def test_configure_applies_what_fits_and_reports_free_share_per_gpu() -> None:
    """inss/ddpg ask for more replicas than may fit: the lab takes as many as the free units and
    the service's own hold; each GPU's free share is its free units of 25 %."""
    from testbed.cluster.base import ServiceTarget

    apps = FakeAppsApi({"chatbot-ollama": (1, 1, 1), "resnet": (1, 1, 1), "tts": (1, 1, 1)})

    def patch(name: str, ns: str, body: dict) -> None:
        apps.state[name][0] = body["spec"]["replicas"]
        core.pod_units = [1] * sum(d[0] for d in apps.state.values())

    apps.patch_namespaced_deployment = patch  # type: ignore[attr-defined]
    core = FakeCoreApi({"gpu1": "4", "gpu2": "4"}, [1, 1, 1])  # 5 of 8 units free
    cluster = _cluster(apps, core)
    assert cluster.configure("resnet", ServiceTarget(9, 20.0, 3)) == ServiceTarget(6, 20.0, 3)
    assert cluster.free_units() == 0 and cluster.gpu_free_pct() == [0.0, 0.0]
    # nothing is free: another service gets only the unit it holds, at its new share
    assert cluster.configure("chatbot", ServiceTarget(2, 10.0, 1)) == ServiceTarget(1, 10.0, 1)
    assert apps.state["chatbot-ollama"][0] == 1 and cluster.free_units() == 0


def test_more_than_one_unit_per_pod_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"tts.units_per_replica: 2 nvidia.com/gpu units per pod"):
        KubernetesCluster([KubeService("tts", units_per_replica=2)], "drafas",
                          apis=KubeApis(FakeAppsApi({}), FakeCoreApi({}, [])))


def test_the_unit_is_the_gpu_operators_mps_replica() -> None:
    """One home for the MPS replicas per GPU (the gpu_operator role's default): the backend's unit
    and its share cap are 100 % divided by it."""
    from pathlib import Path

    import yaml

    from testbed.cluster.kubernetes import UNIT_PCT

    defaults = Path(__file__).resolve().parents[2] / "playbooks/roles/gpu_operator/defaults/main.yml"
    replicas = yaml.safe_load(defaults.read_text())["gpu_operator_mps_replicas"]
    assert UNIT_PCT * replicas == 100.0


def test_the_unit_follows_the_inventorys_mps_replicas() -> None:
    """gpu_operator_mps_replicas: 2 gives pods up to half a GPU, two to a GPU."""
    from testbed.cluster.base import ServiceTarget
    from testbed.cluster.kubernetes import mps_unit_pct

    assert (mps_unit_pct(4), mps_unit_pct(2)) == (25.0, 50.0)
    for bad in (1, "4", True, None):
        with pytest.raises(ConfigError, match=r"inv.yml: gpu_operator_mps_replicas: must be a whole"):
            mps_unit_pct(bad, "inv.yml")
    apps = FakeAppsApi({"chatbot-ollama": (1, 1, 1), "resnet": (1, 1, 1), "tts": (1, 1, 1)})
    apps.patch_namespaced_deployment = lambda name, ns, body: None  # type: ignore[attr-defined]
    cluster = _cluster(apps, FakeCoreApi({"gpu1": "2", "gpu2": "2"}, [1]), unit_pct=50.0)
    assert cluster.gpu_free_pct() == [100.0, 50.0]  # 3 of 4 units free, 2 a GPU
    assert cluster.configure("resnet", ServiceTarget(2, 60.0, 1)) == ServiceTarget(2, 50.0, 1)


def test_a_unit_outside_0_to_100_percent_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"unit_pct: must be in \(0, 100\], got 0"):
        KubernetesCluster([KubeService("tts")], "drafas",
                          apis=KubeApis(FakeAppsApi({}), FakeCoreApi({}, [])), unit_pct=0.0)


def test_running_pods_are_the_deployments_pods_in_phase_running() -> None:
    """The DRAFAS reading's instance count: the pods its Deployment selects, filtered to phase
    Running by the API server (a starting pod is Running before it is ready)."""
    apps = FakeAppsApi({"chatbot-ollama": (2, 1, 1), "resnet": (1, 1, 1), "tts": (1, 1, 1)})
    core = FakeCoreApi({"n": "8"}, [])
    core.running = {"app=chatbot-ollama": 3}
    cluster = _cluster(apps, core)
    assert cluster.running_pods("chatbot") == 3 and cluster.ready_replicas("chatbot") == 1
    assert core.pod_queries == [("drafas", "app=chatbot-ollama", "status.phase=Running")]
