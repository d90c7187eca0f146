"""A service's lab manifest (Deployment + NodePort Service), generated from its profile's `deploy:`.

The profile is the one home of what the lab runs: `deploy:` gives the image, port, readiness path,
CPU, memory, environment and whether a replica takes an MPS share of a GPU; the profile's `units`,
`initial_replicas`, `capacity` and `slo_ms` give the GPU request, the starting replicas, the busy
meter's capacity and the SLO bucket of Istio's duration histogram. What every service's pods need
on the lab is added here, the same for all:
- the labels the lab's Prometheus queries and Istio select pods by (`app`, app.kubernetes.io/*);
- the Istio sidecar, and a `sidecar.istio.io/statsHistogramBuckets` annotation with a bucket
  boundary at the SLO (testbed/metrics/prometheus.py counts violations from `le="<slo>"`);
- the busy meter (workloads/meter) in front of the server, whose /metrics Istio's agent merges
  into the pod's scrape (docs/metrics.md), and through which the Service sends every request;
- with `gpu: true`, `units` of `nvidia.com/gpu` (an MPS share; the device plugin accepts 1 per pod)
  and the MPS share and batch-size environment `KubernetesCluster.configure` patches;
- a readiness probe on `health_path`, 60 s to finish in-flight requests on scale-down, and
  `metadata.namespace` (the lab's `drafas`) on every object.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.cluster.images import BUILT_PREFIX, ImageUse
from testbed.cluster.kubernetes import BATCH_ENV, DEFAULT_NAMESPACE, GPU_RESOURCE, POD_UNITS, SHARE_ENV
from testbed.config.yamlfile import load_yaml_file
from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles import PACKAGED_PROFILES, ServiceProfile
from testbed.profiles.paper import UNIT_PCT

MANIFEST_NAME = "k8s.yaml"  # <dest>/<service>/k8s.yaml, the layout testbed.cluster.images reads
METER_IMAGE = "testbed/meter:v1"  # built from workloads/meter/Dockerfile on every K3s node
METER_PORT = 8090
METER_RESOURCES = {"requests": {"cpu": "100m", "memory": "64Mi"},
                   "limits": {"cpu": "500m", "memory": "128Mi"}}
# bounds (ms) of Istio's request-duration histogram in every pod; the SLO is added where missing
HISTOGRAM_BUCKETS_MS = (10, 25, 50, 100, 150, 200, 250, 300, 400, 500, 750, 1000, 1500, 2000, 2500,
                        3000, 4000, 5000, 10000, 30000, 60000)
GRACE_S = 60  # finish in-flight requests on scale-down
READY_PERIOD_S, READY_FAILURES = 1, 600  # model downloads make a first start slow


def histogram_buckets(slo_ms: float) -> list[float | int]:
    """The duration histogram's bounds (ms), with one at the SLO."""
    slo = int(slo_ms) if float(slo_ms).is_integer() else round(float(slo_ms), 3)
    return sorted({*HISTOGRAM_BUCKETS_MS, slo})


@dataclass(frozen=True)
class Origin:
    """Where a service's profile is written: a file, and the line of its entry there if known."""

    file: str
    line: int | None = None


def origins(names: Iterable[str], profiles_file: Path | None = None) -> dict[str, Origin]:
    """Each service's origin: `profiles_file` (with its entry's line) for the services it
    defines, the packaged profile file for the others."""
    lines: dict[str, int | None] = {}
    if profiles_file is not None:
        doc = load_yaml_file(profiles_file)
        services = doc.data.get("services") if isinstance(doc.data, dict) else None
        lines = {n: doc.line_of(("services", n)) for n in services or {}}
    return {n: Origin(str(profiles_file), lines[n]) if n in lines else Origin(PACKAGED_PROFILES)
            for n in names}


def deploy_problems(profile: ServiceProfile, origin: Origin) -> list[ConfigProblem]:
    """Why `profile` cannot be deployed on the lab (empty: it can)."""
    name = profile.name
    if profile.deploy is None:
        return [ConfigProblem(origin.file, origin.line, f"services.{name}.deploy",
                              f"service {name!r} has no lab container: give its image and port, "
                              "e.g. deploy: {image: registry.example/my-service:1, port: 8080} "
                              "(the lab's manifest is generated from it)")]
    if profile.deploy.gpu and profile.units > POD_UNITS:
        return [ConfigProblem(origin.file, origin.line, f"services.{name}.units",
                              f"{profile.units} {GPU_RESOURCE} units per pod: the device plugin's "
                              f"MPS sharing accepts at most {POD_UNITS}")]
    return []


def check_deployable(profiles: Iterable[ServiceProfile], where: Mapping[str, Origin] | None = None
                     ) -> None:
    """A ConfigError with one line per service the lab cannot deploy."""
    where = where or {}
    problems = [p for profile in profiles
                for p in deploy_problems(profile, where.get(profile.name, _UNKNOWN))]
    if problems:
        raise ConfigError(problems)


_UNKNOWN = Origin("<service profiles>")


def service_manifest(profile: ServiceProfile, namespace: str = DEFAULT_NAMESPACE, *,
                     origin: Origin = _UNKNOWN) -> list[dict[str, Any]]:
    """The Deployment and NodePort Service of `profile` in `namespace`."""
    check_deployable([profile], {profile.name: origin})
    deploy = profile.deploy
    assert deploy is not None
    name = profile.name
    selector = {"app.kubernetes.io/name": name}
    labels = {**selector, "app.kubernetes.io/part-of": "testbed"}
    env = ([{"name": SHARE_ENV, "value": f"{UNIT_PCT:g}"}] if deploy.gpu else [])
    env += [{"name": BATCH_ENV, "value": "1"}]
    env += [{"name": k, "value": v} for k, v in deploy.env.items() if k not in (SHARE_ENV, BATCH_ENV)]
    amount: dict[str, str | int] = {"cpu": deploy.cpu, "memory": deploy.memory}
    if deploy.gpu:
        amount[GPU_RESOURCE] = profile.units
    server: dict[str, Any] = {
        "name": name, "image": deploy.image, "imagePullPolicy": pull_policy(deploy.image),
        **({"command": list(deploy.command)} if deploy.command else {}),
        "ports": [{"name": "http", "containerPort": deploy.port}],
        "env": env,
        "resources": {"requests": dict(amount), "limits": dict(amount)},
        "readinessProbe": {"httpGet": {"path": deploy.health_path, "port": "http"},
                           "periodSeconds": READY_PERIOD_S, "failureThreshold": READY_FAILURES},
    }
    meter = {
        "name": "meter", "image": METER_IMAGE, "imagePullPolicy": pull_policy(METER_IMAGE),
        "args": ["--listen", f"0.0.0.0:{METER_PORT}", "--upstream", f"http://127.0.0.1:{deploy.port}",
                 "--capacity", str(profile.capacity)],
        "ports": [{"name": "metered", "containerPort": METER_PORT}],
        "resources": json.loads(json.dumps(METER_RESOURCES)),
    }
    buckets = json.dumps({"istiocustom": histogram_buckets(profile.slo_ms)}, separators=(",", ":"))
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": profile.initial_replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {
                    "labels": {"app": name, **labels},
                    "annotations": {
                        "sidecar.istio.io/inject": "true",
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(METER_PORT),
                        "prometheus.io/path": "/metrics",
                        "sidecar.istio.io/statsHistogramBuckets": buckets,
                    },
                },
                "spec": {"terminationGracePeriodSeconds": GRACE_S, "containers": [server, meter]},
            },
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"type": "NodePort", "selector": selector,
                 "ports": [{"name": "http", "port": deploy.port, "targetPort": "metered"}]},
    }
    return [deployment, service]


def pull_policy(image: str) -> str:
    """`Never` for an image the lab builds on the nodes (no registry has it), else `IfNotPresent`."""
    return "Never" if image.startswith(BUILT_PREFIX) else "IfNotPresent"


def manifest_text(profile: ServiceProfile, namespace: str = DEFAULT_NAMESPACE, *,
                  origin: Origin = _UNKNOWN) -> str:
    head = (f"# {profile.name}: generated by testbed from the deploy: of its service profile "
            f"({origin.file}); change the profile, not this file\n")
    return head + yaml.safe_dump_all(service_manifest(profile, namespace, origin=origin),
                                     sort_keys=False)


def write_manifests(profiles: Iterable[ServiceProfile], dest: Path,
                    namespace: str = DEFAULT_NAMESPACE, *,
                    where: Mapping[str, Origin] | None = None) -> list[Path]:
    """`dest`/<service>/k8s.yaml for each profile (all checked before the first is written)."""
    profiles = list(profiles)
    where = where or {}
    check_deployable(profiles, where)
    out = []
    for profile in profiles:
        path = dest / profile.name / MANIFEST_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(manifest_text(profile, namespace, origin=where.get(profile.name, _UNKNOWN)),
                        encoding="utf-8")
        out.append(path)
    return out


def deploy_image_uses(profiles: Iterable[ServiceProfile], where: Mapping[str, Origin] | None = None
                      ) -> list[ImageUse]:
    """The images the generated manifests name, each placed at the profile field it comes from
    (the busy meter's at the generator's own), for testbed.cluster.images' checks."""
    profiles = list(profiles)
    where = where or {}
    check_deployable(profiles, where)
    uses = []
    for profile in profiles:
        assert profile.deploy is not None
        name, origin = profile.name, where.get(profile.name, _UNKNOWN)
        owner = f"Deployment/{name}"
        uses.append(ImageUse(Path(origin.file), origin.line, f"services.{name}.deploy.image", owner,
                             profile.deploy.image, pull_policy(profile.deploy.image), None))
    if profiles:  # the same busy meter in every pod
        uses.append(ImageUse(Path(__file__), None, "METER_IMAGE", "every Deployment", METER_IMAGE,
                             pull_policy(METER_IMAGE), None))
    return uses
