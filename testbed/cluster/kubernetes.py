"""Service replicas as Kubernetes Deployments: scale through the scale subresource, GPU units from the API.

The lab profile's `ClusterBackend`. Each service is one Deployment in one namespace; the scaler
patches `spec.replicas` of its scale subresource (the same call `kubectl scale` makes) and sees
readiness from the Deployment's status. Resource units are the extended resource the NVIDIA
device plugin advertises (`nvidia.com/gpu`): with MPS sharing of 4 replicas, one physical GPU
shows as 4 allocatable units, and every pod requests exactly one of them, because the device
plugin refuses a request for more than one shared unit. A pod's MPS share is its
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, which can only lower the 100/replicas % that the plugin's
MPS control daemon gives each client (docs/lab.md, "GPU shares").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from testbed.clock import WALL_TIME, PollClock
from testbed.cluster.base import ServiceTarget
from testbed.errors import ConfigError, ConfigProblem, MissingRequirement, StateError
from testbed.profiles.paper import UNIT_PCT

DEFAULT_NAMESPACE = "drafas"  # where the lab's services run (testbed/cluster/manifest.py)

GPU_RESOURCE = "nvidia.com/gpu"
SHARE_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"  # MPS caps the pod's SMs at this % of the GPU
BATCH_ENV = "TESTBED_BATCH_SIZE"  # the service's batcher (workloads/*/server.py) reads it
# workloads/imgcls/server.py's mode: overlap (its default) or serial (the dissertation's server)
IMGCLS_MODE_ENV = "TESTBED_IMGCLS_MODE"
# One nvidia.com/gpu unit = one of the device plugin's MPS replicas of a GPU (100 / replicas %,
# playbooks/roles/gpu_operator/defaults gpu_operator_mps_replicas); also the most SMs a pod gets.
POD_UNITS = 1  # under MPS sharing the device plugin refuses requests for more than one unit
MPS_REPLICAS = round(100 / UNIT_PCT)
# Pods in these phases hold no resources; the API server filters them out for us.
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True)
class KubeService:
    """How one service maps onto the cluster.

    `units_per_replica=None` reads the GPU request from the Deployment's pod template (under MPS
    sharing it can only be 1);
    `endpoint=None` derives `http://<service>.<namespace>.svc.cluster.local:<port>` from the
    Kubernetes Service of the same name (clients outside the cluster should set it explicitly,
    e.g. to the Istio ingress gateway).
    """

    name: str
    deployment: str | None = None
    units_per_replica: int | None = None
    endpoint: str | None = None

    @property
    def deployment_name(self) -> str:
        return self.deployment or self.name


def parse_quantity(value: str | int | float | None) -> float:
    """A Kubernetes resource quantity ("4", "500m", "2Ki", "1G") as a number."""
    if value is None:
        return 0.0
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    binary = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
    decimal = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
               "P": 1e15, "E": 1e18}
    try:
        for suffix, factor in binary.items():
            if text.endswith(suffix):
                return float(text[: -len(suffix)]) * factor
        if text and text[-1] in decimal:
            return float(text[:-1]) * decimal[text[-1]]
        return float(text)
    except ValueError:
        raise ValueError(f"not a Kubernetes quantity: {value!r}") from None


def mps_unit_pct(replicas: Any, source: str = "<inventory>") -> float:
    """The unit (and the largest share a pod gets) for the device plugin's MPS `replicas` per GPU:
    100 / replicas %. The plugin refuses fewer than 2 replicas."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
        raise ConfigError([ConfigProblem(source, None, "gpu_operator_mps_replicas",
                                         f"must be a whole number >= 2 (MPS replicas per GPU), "
                                         f"got {replicas!r}")])
    return 100.0 / replicas


def _resource(resources: Any, name: str) -> float:
    """A container's request for `name`; extended resources may set only limits (requests = limits)."""
    if resources is None:
        return 0.0
    requests = getattr(resources, "requests", None) or {}
    limits = getattr(resources, "limits", None) or {}
    if name in requests:
        return parse_quantity(requests[name])
    return parse_quantity(limits.get(name))


def pod_units(pod_spec: Any, resource: str = GPU_RESOURCE) -> int:
    """Units one pod holds: the larger of its containers' sum and any single init container."""
    containers = sum(_resource(c.resources, resource) for c in (pod_spec.containers or []))
    init = max((_resource(c.resources, resource) for c in (pod_spec.init_containers or [])),
               default=0.0)
    return round(max(containers, init))


@dataclass(frozen=True)
class KubeApis:
    """The two Kubernetes API clients a cluster calls: Deployments (`apps`, AppsV1Api) and
    pods, Services and nodes (`core`, CoreV1Api); check mode's one stand-in can be both."""

    apps: Any
    core: Any


class KubernetesCluster:
    """Replicas of named services as Deployments in one namespace (implements `ClusterBackend`)."""

    def __init__(self, services: Iterable[KubeService], namespace: str, *, apis: KubeApis,
                 resource: str = GPU_RESOURCE, clock: PollClock = WALL_TIME,
                 max_units: int | None = None, node_address: str | None = None,
                 unit_pct: float = UNIT_PCT):
        """`apis`: the clients it calls; `clock`: what `wait_ready` polls on; `max_units` caps
        `total_units` (a scenario's pool on a bigger cluster); `node_address` makes `endpoint`
        answer `http://<node_address>:<nodePort>` for NodePort Services, the address clients
        outside the cluster (the lab's UEs) reach; `unit_pct` is 100 / the device plugin's MPS
        replicas per GPU."""
        self._services = {s.name: s for s in services}
        if not self._services:
            raise ConfigError([ConfigProblem("<kubernetes cluster>", None, "services",
                                             "at least one service is needed")])
        too_many = [ConfigProblem("<kubernetes cluster>", None, f"{s.name}.units_per_replica",
                                  f"{s.units_per_replica} {resource} units per pod: the device "
                                  f"plugin's MPS sharing accepts at most {POD_UNITS}")
                    for s in self._services.values()
                    if s.units_per_replica is not None and s.units_per_replica > POD_UNITS]
        if too_many:
            raise ConfigError(too_many)
        if not 0 < unit_pct <= 100:
            raise ConfigError([ConfigProblem("<kubernetes cluster>", None, "unit_pct",
                                             f"must be in (0, 100], got {unit_pct:g}")])
        self.unit_pct = unit_pct
        self.namespace = namespace
        self.apps = apis.apps
        self.core = apis.core
        self.resource = resource
        self._clock = clock
        self.max_units = max_units
        self.node_address = node_address
        self._units: dict[str, int] = {}  # units per pod that `configure` set (always POD_UNITS)
        config = getattr(getattr(apis.apps, "api_client", None), "configuration", None)
        self.api_host = getattr(config, "host", None) or "the Kubernetes API server"

    @classmethod
    def connect(cls, services: Iterable[KubeService], namespace: str = DEFAULT_NAMESPACE, *,
                kubeconfig: str | None = None, context: str | None = None,
                resource: str = GPU_RESOURCE, **options: Any) -> KubernetesCluster:
        """Connect with in-cluster config when running in a pod, else the kubeconfig file."""
        try:
            from kubernetes import client, config
        except ImportError:
            raise MissingRequirement(
                "the Kubernetes backend needs the `kubernetes` package: pip install 'testbed[lab]'"
            ) from None
        try:
            if kubeconfig is None and context is None:
                try:
                    config.load_incluster_config()
                except config.ConfigException:
                    config.load_kube_config()
            else:
                config.load_kube_config(config_file=kubeconfig, context=context)
        except (config.ConfigException, FileNotFoundError, OSError) as exc:
            raise MissingRequirement(
                f"no Kubernetes configuration ({exc}); set KUBECONFIG or pass --kubeconfig"
            ) from None
        return cls(services, namespace, apis=KubeApis(client.AppsV1Api(), client.CoreV1Api()),
                   resource=resource, **options)

    # --- ClusterBackend ---------------------------------------------------------------------

    def services(self) -> list[str]:
        return list(self._services)

    def desired_replicas(self, service: str) -> int:
        scale = self._call("read scale of", self._deployment(service),
                           self.apps.read_namespaced_deployment_scale)
        return int(scale.spec.replicas or 0)

    def ready_replicas(self, service: str) -> int:
        dep = self._call("read", self._deployment(service), self.apps.read_namespaced_deployment_status)
        return int((dep.status and dep.status.ready_replicas) or 0)

    def running_pods(self, service: str) -> int:
        """The pods of `service`'s Deployment in phase Running, starting ones (readiness not
        passed) and deleted ones not yet gone included: the DRAFAS testbed's instance count
        (tu-nv/drafas drl/env.py:129-133)."""
        dep = self._call("read", self._deployment(service), self.apps.read_namespaced_deployment)
        labels = (dep.spec.selector.match_labels or {}) if dep.spec and dep.spec.selector else {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        pods = self._list(f"list pods of {service}", self.core.list_namespaced_pod,
                          namespace=self.namespace, label_selector=selector,
                          field_selector="status.phase=Running")
        return len(pods.items)

    def scale(self, service: str, replicas: int) -> None:
        """Set the Deployment's replica count; refuses a scale-up the free units cannot hold."""
        if replicas < 0:
            raise StateError(f"{service}: cannot scale to {replicas} replicas")
        current = self.desired_replicas(service)
        extra_units = (replicas - current) * self.units_per_replica(service)
        if extra_units > 0 and extra_units > self.free_units():
            raise StateError(
                f"{service}: scaling {current} → {replicas} needs {extra_units} {self.resource} "
                f"units, {self.free_units()} free"
            )
        body = {"spec": {"replicas": int(replicas)}}
        self._call("scale", self._deployment(service), self.apps.patch_namespaced_deployment_scale, body=body)

    def units_per_replica(self, service: str) -> int:
        svc = self._service(service)
        if service in self._units:  # a share policy changed the pods' share (and units)
            return self._units[service]
        if svc.units_per_replica is not None:
            return svc.units_per_replica
        dep = self._call("read", self._deployment(service), self.apps.read_namespaced_deployment)
        return pod_units(dep.spec.template.spec, self.resource)

    def total_units(self) -> int:
        nodes = self._list("list nodes", self.core.list_node)
        total = round(sum(parse_quantity((n.status.allocatable or {}).get(self.resource))
                          for n in nodes.items if n.status is not None))
        return total if self.max_units is None else min(total, self.max_units)

    def used_units(self) -> int:
        """Units requested by every live pod in the cluster (other tenants' pods included)."""
        pods = self._list("list pods", self.core.list_pod_for_all_namespaces,
                          field_selector=LIVE_PODS)
        return sum(pod_units(p.spec, self.resource) for p in pods.items if p.spec is not None)

    def free_units(self) -> int:
        if self.max_units is None:
            return max(self.total_units() - self.used_units(), 0)
        # within the cap: what our own Deployments do not hold, if the cluster has it free
        nodes = self._list("list nodes", self.core.list_node)
        allocatable = round(sum(parse_quantity((n.status.allocatable or {}).get(self.resource))
                                for n in nodes.items if n.status is not None))
        ours = sum(self.desired_replicas(s) * self.units_per_replica(s) for s in self._services)
        return max(min(self.max_units - ours, allocatable - self.used_units()), 0)

    def endpoint(self, service: str) -> str:
        svc = self._service(service)
        if svc.endpoint:
            return svc.endpoint.rstrip("/")
        self._service(service)
        k8s_svc = self._call("read service", service, self.core.read_namespaced_service)
        ports = k8s_svc.spec.ports or []
        if not ports:
            raise StateError(f"Service {service!r} in namespace {self.namespace!r} has no ports")
        if self.node_address:
            if not ports[0].node_port:
                raise StateError(f"Service {service!r} in namespace {self.namespace!r} has no "
                                 "nodePort: clients outside the cluster cannot reach it (make it "
                                 "type NodePort, as the generated manifests do, or set its endpoint)")
            return f"http://{self.node_address}:{ports[0].node_port}"
        return f"http://{k8s_svc.metadata.name}.{self.namespace}.svc.cluster.local:{ports[0].port}"

    # --- GpuClusterBackend --------------------------------------------------------------------

    def target(self, service: str) -> ServiceTarget:
        """Replicas, share and batch of the pod template; the share is what MPS lets a pod use:
        its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (default: all) capped at `unit_pct`."""
        dep = self._call("read", self._deployment(service), self.apps.read_namespaced_deployment)
        env = _env(dep.spec.template.spec)
        share = min(float(env.get(SHARE_ENV, 100.0)), self.unit_pct)
        return ServiceTarget(max(int(dep.spec.replicas or 0), 1), share, int(env.get(BATCH_ENV, 1)))

    @property
    def units_per_gpu(self) -> int:
        return round(100.0 / self.unit_pct)

    def gpu_free_pct(self) -> list[float]:
        """Free share per GPU: its free units times `unit_pct` (a share up to `unit_pct` fits
        wherever a unit is free, and no pod gets more). Which GPU the device plugin gave a pod is
        not in the API, so free units are packed into as few GPUs as they fill."""
        total, free = self.total_units(), self.free_units()
        per_gpu = self.units_per_gpu
        gpus = max(1, -(-total // per_gpu))
        out = [0.0] * gpus
        for k in range(gpus):
            take = min(per_gpu, free)
            out[k] = take * self.unit_pct
            free -= take
        return out

    def share_used_pct(self, service: str) -> float:
        t = self.target(service)
        return self.desired_replicas(service) * t.share_pct

    def configure(self, service: str, target: ServiceTarget) -> ServiceTarget:
        """One patch of the Deployment: replicas, the container's MPS share and batch size (env),
        and one GPU unit per pod. A share above `unit_pct` is applied as `unit_pct`: the MPS
        control daemon caps every client there. A changed pod template rolls the Deployment: new
        pods start while the old ones serve (maxSurge), as InSS's shadow replicas do. Placement
        (`gpus`) is left to the scheduler. Applies as many replicas as the free units and the
        ones the service holds can take (none fit: nothing changes); returns what it applied."""
        current = self.target(service)
        share = min(target.share_pct, self.unit_pct)
        held = self.desired_replicas(service) * self.units_per_replica(service)
        replicas = min(target.replicas, (self.free_units() + held) // POD_UNITS)
        if replicas < 1:
            return current
        if (share, target.batch) == (current.share_pct, current.batch):
            self.scale(service, replicas)
            return ServiceTarget(replicas, current.share_pct, current.batch)
        dep = self._call("read", self._deployment(service), self.apps.read_namespaced_deployment)
        containers = dep.spec.template.spec.containers or []
        if not containers:
            raise StateError(f"{service}: the Deployment has no container to configure")
        c = containers[0]
        values = {SHARE_ENV: f"{share:g}", BATCH_ENV: str(target.batch)}
        # in place: a later variable may use $(TESTBED_BATCH_SIZE) (the chatbot's OLLAMA_NUM_PARALLEL)
        env = [{**e, "value": values.pop(e["name"], e["value"])} for e in _env_list(c)]
        env += [{"name": k, "value": v} for k, v in values.items()]
        amount = {self.resource: str(POD_UNITS)}
        body = {"spec": {"replicas": int(replicas), "template": {"spec": {"containers": [
            {"name": c.name, "env": env, "resources": {"requests": amount, "limits": amount}}]}}}}
        self._call("configure", self._deployment(service), self.apps.patch_namespaced_deployment,
                   body=body)
        self._units[service] = POD_UNITS
        return ServiceTarget(replicas, share, target.batch)

    # --- beyond the protocol ----------------------------------------------------------------

    def wait_ready(self, service: str, replicas: int | None = None, *, timeout_s: float = 300.0,
                   poll_s: float = 2.0) -> int:
        """Block until `replicas` (default: the desired count) are ready; StateError on timeout."""
        want = self.desired_replicas(service) if replicas is None else replicas
        deadline = self._clock.monotonic() + timeout_s
        while True:
            ready = self.ready_replicas(service)
            if ready >= want:
                return ready
            if self._clock.monotonic() >= deadline:
                raise StateError(
                    f"{service}: {ready}/{want} replicas ready after {timeout_s:g} s in namespace "
                    f"{self.namespace!r} (kubectl -n {self.namespace} describe deployment "
                    f"{self._deployment(service)})"
                )
            self._clock.sleep(poll_s)

    def gpu_nodes(self) -> dict[str, int]:
        """Allocatable units per node, for nodes that have any (MPS partitions on the lab)."""
        nodes = self._list("list nodes", self.core.list_node)
        out: dict[str, int] = {}
        for n in nodes.items:
            units = round(parse_quantity(((n.status and n.status.allocatable) or {}).get(self.resource)))
            if units:
                out[n.metadata.name] = units
        return out

    # --- helpers ----------------------------------------------------------------------------

    def _service(self, service: str) -> KubeService:
        try:
            return self._services[service]
        except KeyError:
            raise ConfigError([ConfigProblem("<kubernetes cluster>", None, "service",
                                             f"unknown service {service!r} (known: "
                                             f"{', '.join(self._services)})")]) from None

    def _deployment(self, service: str) -> str:
        return self._service(service).deployment_name

    def _call(self, what: str, name: str, method: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return method(name, self.namespace, **kwargs)
        except Exception as exc:
            raise _translate(exc, f"{what} {name!r} in namespace {self.namespace!r}",
                             self.api_host) from None

    def _list(self, what: str, method: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return method(**kwargs)
        except Exception as exc:
            raise _translate(exc, what, self.api_host) from None


def _env_list(container: Any) -> list[dict[str, str]]:
    return [{"name": e.name, "value": e.value} for e in (getattr(container, "env", None) or [])
            if getattr(e, "value", None) is not None]


def _env(pod_spec: Any) -> dict[str, str]:
    containers = getattr(pod_spec, "containers", None) or []
    return {e["name"]: e["value"] for e in _env_list(containers[0])} if containers else {}


def _reason(exc: Exception) -> str:
    """The root of a connection failure in one line ("[Errno 111] Connection refused")."""
    text = str(getattr(exc, "reason", None) or exc)
    m = re.search(r"(\[Errno -?\d+\][^'\")]*|timed out|Read timed out)", text)
    return m.group(1).strip() if m else " ".join(text.split())[:200]


def _translate(exc: Exception, what: str, api_host: str = "the Kubernetes API server") -> Exception:
    """API and connection failures as harness errors that say what was being done."""
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or type(exc).__name__
    if status == 404:
        return StateError(f"cannot {what}: not found")
    if status in (401, 403):
        return MissingRequirement(f"cannot {what}: the API server refused ({status} {reason}); "
                                  "check the kubeconfig's credentials and RBAC")
    if isinstance(status, int):
        return StateError(f"cannot {what}: API error {status} {reason}")
    if isinstance(exc, OSError | ConnectionError) or "MaxRetryError" in type(exc).__name__:
        return MissingRequirement(f"{api_host}: Kubernetes API server unreachable, cannot {what} "
                                  f"({_reason(exc)})")
    return exc


def services_from_mapping(doc: Mapping[str, Mapping[str, Any]]) -> list[KubeService]:
    """`{chatbot: {deployment: ..., units_per_replica: 1, endpoint: ...}}` → KubeService list."""
    return [KubeService(name, **dict(fields or {})) for name, fields in doc.items()]
