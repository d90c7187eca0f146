"""The lab's check mode: the same backends, with clients that print each action instead of doing it.

`testbed run --profile lab --check` runs the scenario's real code path — the runner, the scaler
loop, `KubernetesCluster`, `PrometheusMetrics`, `LabTraffic`, `LabSession` — against these
stand-ins, on a virtual clock that never waits, so it prints every action a lab run would take,
in order, without a lab: Kubernetes calls (reads and the scale patches), Prometheus queries,
commands on the hosts, copies and fetches. What a stand-in answers is an assumption, and says so:
every Deployment becomes ready at once, Prometheus reports no traffic, each UE group has its PDU
sessions at the first addresses of its slice's subnet.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace as NS
from typing import TYPE_CHECKING, Any

from testbed.clock import PollClock
from testbed.cluster.kubernetes import KubeApis, KubernetesCluster, KubeService
from testbed.config import TestbedSpec
from testbed.lab.hosts import CommandResult
from testbed.metrics.prometheus import PrometheusMetrics, PromService

if TYPE_CHECKING:
    from testbed.lab.session import Reach


class ActionLog:
    """Numbered action lines. Consecutive reads of one kind (`group`, e.g. the 9 PromQL queries
    of a window) become one line; a line equal to the previous one is counted, not repeated."""

    def __init__(self, emit: Callable[[str], None] = print, clock: Callable[[], float] | None = None):
        self.emit = emit
        self.clock = clock
        self.lines: list[str] = []
        self._last: str | None = None
        self._repeats = 0
        self._group: str | None = None
        self._items: list[str] = []
        self._at = 0.0

    def __call__(self, text: str, group: str | None = None) -> None:
        if group is not None and group == self._group:
            self._items.append(text)
            return
        self._close_group()
        if group is not None:
            self._group, self._items, self._at = group, [text], self._now()
            return
        self._line(text, self._now())

    def _now(self) -> float:
        return self.clock() if self.clock else 0.0

    def _close_group(self) -> None:
        if self._group is None:
            return
        items = list(dict.fromkeys(self._items))
        text = (self._items[0] if len(self._items) == 1 else
                f"{self._group} ×{len(self._items)}: {'; '.join(items)}")
        self._group, self._items = None, []
        self._line(text, self._at)

    def _line(self, text: str, at: float) -> None:
        if text == self._last:
            self._repeats += 1
            return
        self._flush_repeats()
        self._last = text
        stamp = f"t={at:6.1f}s  " if self.clock else ""
        line = f"{len(self.lines) + 1:4d}  {stamp}{text}"
        self.lines.append(line)
        self.emit(line)

    def _flush_repeats(self) -> None:
        if self._repeats:
            line = f"      … the same {self._repeats} more time{'s' if self._repeats > 1 else ''}"
            self.lines.append(line)
            self.emit(line)
        self._repeats = 0

    def flush(self) -> None:
        self._close_group()
        self._flush_repeats()


class VirtualTime:
    """A clock whose sleeps advance it instantly (sync and async)."""

    def __init__(self, start: float = 1_800_000_000.0):
        self.t = start
        self._origin = start

    def monotonic(self) -> float:
        return self.t - self._origin

    def time(self) -> float:
        return self.t

    def elapsed(self) -> float:
        return self.t - self._origin

    def advance(self, seconds: float) -> None:
        self.t += max(seconds, 0.0)

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)


class PlanHosts:
    """`HostRunner` that logs each command; answers `ip addr` with the expected PDU sessions."""

    def __init__(self, log: ActionLog, spec: TestbedSpec):
        self.log = log
        self.spec = spec

    def run(self, host: str, argv: Sequence[str], *, what: str, check: bool = True
            ) -> CommandResult:
        self.log(f"{host}$ {' '.join(str(a) for a in argv)}")
        if list(argv[:3]) == ["ip", "-o", "-4"]:
            return CommandResult(0, self._addresses())
        if list(argv[:2]) == ["systemctl", "is-active"]:
            return CommandResult(0, "\n".join("active" for _ in argv[2:]))
        return CommandResult(0, "")

    def _addresses(self) -> str:
        lines, tun = [], 0
        for s in self.spec.slices:
            count = sum(g.count for g in self.spec.ue_groups if g.slice == s.name)
            hosts = ipaddress.ip_network(str(s.subnet)).hosts()
            next(hosts)  # the gateway
            for _ in range(count):
                lines.append(f"{9 + tun}: uesimtun{tun}    inet {next(hosts)}/32 scope global "
                             f"uesimtun{tun}")
                tun += 1
        return "\n".join(lines)

    def copy(self, host: str, src: Path, dest: str, *, what: str) -> None:
        self.log(f"copy {src.name} → {host}:{dest}")

    def fetch(self, host: str, src: str, dest: Path, *, what: str) -> None:
        self.log(f"fetch {host}:{src} → {dest}")


class PlanKube:
    """AppsV1Api + CoreV1Api stand-in: logs each call (REST verb and path), keeps replica counts;
    every Deployment is ready at once; nodes offer `units` of nvidia.com/gpu."""

    def __init__(self, log: ActionLog, replicas: dict[str, int], units: int,
                 node_ports: dict[str, int] | None = None):
        self.log = log
        self.replicas = dict(replicas)
        self.units = units
        self.node_ports = node_ports or {}
        self.templates: dict[str, tuple[dict[str, str], int]] = {}  # name -> (env, units per pod)
        self.api_client = NS(configuration=NS(host="(check mode)"))

    def read_namespaced_deployment_scale(self, name: str, namespace: str) -> Any:
        self.log(f"GET deployments/{name}/scale", group="k8s reads")
        return NS(spec=NS(replicas=self.replicas.get(name, 1)))

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: Any) -> Any:
        self.log(f"k8s PATCH /apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale "
                 f"{json.dumps(body)}")
        self.replicas[name] = body["spec"]["replicas"]
        return NS(spec=NS(replicas=self.replicas[name]))

    def read_namespaced_deployment_status(self, name: str, namespace: str) -> Any:
        self.log(f"GET deployments/{name}/status", group="k8s reads")
        return NS(status=NS(ready_replicas=self.replicas.get(name, 1)))

    def read_namespaced_deployment(self, name: str, namespace: str) -> Any:
        """The pod template as a share policy reads it: its env (MPS share, batch) and GPU units."""
        self.log(f"GET deployments/{name}", group="k8s reads")
        env, units = self.templates.get(name, ({}, 1))
        container = NS(name=name, env=[NS(name=k, value=v) for k, v in env.items()],
                       resources=NS(requests={"nvidia.com/gpu": str(units)}, limits={}))
        return NS(spec=NS(replicas=self.replicas.get(name, 1), template=NS(spec=NS(
            containers=[container], init_containers=None))))

    def patch_namespaced_deployment(self, name: str, namespace: str, body: Any) -> Any:
        """A share policy's configure: replicas, env and GPU units in one patch (logged whole)."""
        self.log(f"k8s PATCH /apis/apps/v1/namespaces/{namespace}/deployments/{name} "
                 f"{json.dumps(body)}")
        spec = body["spec"]
        self.replicas[name] = spec["replicas"]
        (container,) = spec["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        self.templates[name] = (env, int(container["resources"]["requests"]["nvidia.com/gpu"]))
        return self.read_namespaced_deployment(name, namespace)

    def read_namespaced_service(self, name: str, namespace: str) -> Any:
        self.log(f"GET services/{name}", group="k8s reads")
        port = self.node_ports.get(name, 30000 + len(name))
        return NS(metadata=NS(name=name), spec=NS(ports=[NS(port=80, node_port=port)]))

    def list_node(self) -> Any:
        self.log("GET nodes", group="k8s reads")
        return NS(items=[NS(metadata=NS(name="node"), status=NS(
            allocatable={"nvidia.com/gpu": str(self.units)}))])

    def list_pod_for_all_namespaces(self, field_selector: str = "") -> Any:
        self.log("GET pods (all namespaces, live)", group="k8s reads")
        pods = [NS(spec=NS(containers=[NS(resources=NS(
                    requests={"nvidia.com/gpu": str(self.templates.get(name, ({}, 1))[1])},
                    limits={}))], init_containers=None))
                for name, n in self.replicas.items() for _ in range(n)]
        return NS(items=pods)


def plan_fetch(log: ActionLog) -> Callable[[str, float], bytes]:
    """Prometheus HTTP stand-in: logs each query, answers "no data" (an empty vector). A query is
    printed whole the first time its shape is asked, as its window (e.g. "[30000ms]") after."""
    seen: set[str] = set()

    def fetch(url: str, timeout_s: float) -> bytes:
        parsed = urllib.parse.urlsplit(url)
        if parsed.path.endswith("/status/buildinfo"):
            log(f"prometheus GET {parsed.path}")
            return json.dumps({"status": "success", "data": {"version": "(check mode)"}}).encode()
        query = urllib.parse.parse_qs(parsed.query).get("query", [""])[0]
        if query.startswith("count(") and "[" not in query:  # a series presence check
            log(f"prometheus query: {query} (a plan cannot know: taken as present)",
                group="prometheus series checks")
            return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
                {"metric": {}, "value": [0, "1"]}]}}).encode()
        shape = _WINDOW.sub("[W]", query).replace("offset ", "")
        if shape in seen:
            log(_short(query), group="prometheus queries")  # one line per window read
        else:
            seen.add(shape)
            log(f"prometheus query: {query}")
        return json.dumps({"status": "success",
                           "data": {"resultType": "vector", "result": []}}).encode()

    return fetch


_WINDOW = re.compile(r"\[\d+ms(?=[]:])|(?<=offset )\d+ms")


def _short(promql: str) -> str:
    """What a window query reads, by its range: "[30000ms]" (the PromQL is in `WindowQueries`)."""
    m = re.search(r"\[(\d+ms)", promql)
    return f"[{m.group(1)}]" if m else re.sub(r"\{[^{}]*\}", "{…}", promql)


class PlanBackends:
    """Check mode's `LabSession` backends: each client prints its actions (`PlanHosts`,
    `PlanKube` behind a real `KubernetesCluster`, `plan_fetch` behind a real
    `PrometheusMetrics`) on the virtual clock `vt`; `replicas`: each Deployment's count to start
    from."""

    def __init__(self, log: ActionLog, vt: VirtualTime, spec: TestbedSpec, replicas: dict[str, int]):
        self.log, self.vt, self.spec, self.replicas = log, vt, spec, replicas
        self.clock = PollClock(vt.monotonic, vt.advance)

    def hosts(self, reach: Reach) -> PlanHosts:
        return PlanHosts(self.log, self.spec)

    def cluster(self, reach: Reach, services: list[KubeService]) -> KubernetesCluster:
        kube = PlanKube(self.log, dict(self.replicas), reach.max_units or 0)
        return KubernetesCluster(services, reach.namespace, apis=KubeApis(kube, kube),
                                 max_units=reach.max_units, node_address=reach.node_address,
                                 clock=self.clock, unit_pct=reach.unit_pct)

    def metrics(self, reach: Reach, services: list[PromService]) -> PrometheusMetrics:
        return PrometheusMetrics(reach.prometheus, services, fetch=plan_fetch(self.log),
                                 now=self.vt.time)
