"""`testbed up/down/status --profile lab`: prepare the run directory, run the playbooks, read the state back.

`lab_up` renders the Open5GS/UERANSIM configs from the spec and the inventory's addresses into
the run directory (or copies a `testbed render` output there, so a run is self-contained), adds
the slice shaping script and each service's manifest (generated from its profile's `deploy:`,
testbed.cluster.manifest), and runs site.yml with the spec as extra variables; `lab_down` runs
reset.yml; `lab_status` reads units and PDU sessions from the hosts (status.yml), nodes, GPU
units and replicas from the cluster, and targets from Prometheus.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from testbed.cluster.images import ImageBuild, builds_for
from testbed.cluster.kubernetes import DEFAULT_NAMESPACE
from testbed.cluster.manifest import Origin, check_deployable, deploy_image_uses, origins, write_manifests
from testbed.config import TestbedSpec, load_yaml_file
from testbed.errors import ConfigError, ConfigProblem, MissingRequirement, StateError
from testbed.lab.graph import require_ordered
from testbed.lab.inventory import LabInventory
from testbed.lab.render import CORE_GROUP, RAN_GROUP, check_rendered, peer_addresses, render_lab
from testbed.lab.runner import PlaybookResult, run_playbook
from testbed.lab.shaping_script import shaping_script
from testbed.paths import REPO_ROOT, RUNS_DIR, new_run_dir
from testbed.profiles import ServiceProfile, load_profiles

# RUN_DIR/rendered/workloads/<service>/k8s.yaml: the manifests the services role applies
MANIFESTS_SUBDIR = "workloads"


def upf_instances(rendered: Path) -> list[dict[str, Any]]:
    """Each rendered `open5gs/upf*.yaml` with its sessions (subnet, gateway, TUN device) and the
    N3 addresses its GTP-U binds (which the upf role checks the core host has)."""
    out = []
    for path in sorted((rendered / "open5gs").glob("upf*.yaml")):
        doc = load_yaml_file(path)
        upf = (doc.data or {}).get("upf") or {}
        sessions = upf.get("session") or []
        if not sessions:
            raise ConfigError([ConfigProblem(str(path), doc.line_of(("upf",)), "upf.session",
                                             "a UPF needs at least one session subnet")])
        norm = []
        for i, s in enumerate(sessions):
            if "subnet" not in s:
                raise ConfigError([doc.problem(("upf", "session", i), "session has no subnet")])
            net = str(s["subnet"])
            head, _, _ = net.partition("/")
            octets = head.split(".")
            gateway = s.get("gateway") or ".".join([*octets[:3], str(int(octets[3]) + 1)])
            norm.append({"subnet": net, "gateway": str(gateway), "dev": s.get("dev", "ogstun")})
        n3: list[str] = []
        for server in (upf.get("gtpu") or {}).get("server") or []:
            address = server.get("address")
            n3 += [str(a) for a in (address if isinstance(address, list) else [address]) if a]
        out.append({"stem": path.stem, "sessions": norm, "n3": n3})
    return out


def gnb_address(rendered: Path) -> str:
    """The rendered gNB's GTP-U address (also its NGAP and radio-link address)."""
    path = rendered / "ueransim" / "gnb.yaml"
    doc = load_yaml_file(path)
    value = (doc.data or {}).get("gtpIp") if isinstance(doc.data, dict) else None
    if not value:
        raise ConfigError([doc.problem(("gtpIp",), "the gNB needs its GTP-U address")])
    return str(value)


def prepare_rendered(spec: TestbedSpec, run_dir: Path, rendered_dir: Path | None,
                     inventory: LabInventory | None = None) -> Path:
    """run_dir/rendered: open5gs/, ueransim/ and shaping/tb-slice-shaping.sh. Without
    `rendered_dir` the configs are rendered from `spec` and `inventory` (its addresses)."""
    dest = run_dir / "rendered"
    if rendered_dir is None:
        if inventory is None:
            raise MissingRequirement("rendering the lab's configs needs its inventory "
                                     "(the addresses hosts reach each other on)")
        if dest.exists():
            shutil.rmtree(dest)
        render_lab(spec, inventory, dest)
    else:
        for part in ("open5gs", "ueransim"):
            if not (rendered_dir / part).is_dir():
                raise MissingRequirement(f"{rendered_dir / part} is missing: render it with "
                                         f"`testbed render {part} -i INVENTORY -o "
                                         f"{rendered_dir / part}`")
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(rendered_dir, dest)
    for group in spec.ue_groups:
        if not (dest / "ueransim" / f"ue-{group.name}.yaml").is_file():
            raise MissingRequirement(f"{dest / 'ueransim'} has no ue-{group.name}.yaml for UE group "
                                     f"{group.name!r}")
    if not (dest / "ueransim" / "gnb.yaml").is_file():
        raise MissingRequirement(f"{dest / 'ueransim'} has no gnb.yaml")
    (dest / "shaping").mkdir(exist_ok=True)
    script = dest / "shaping" / "tb-slice-shaping.sh"
    script.write_text(shaping_script(spec))
    script.chmod(0o755)
    return dest


def lab_services(profiles_file: Path | None = None
                 ) -> tuple[list[ServiceProfile], dict[str, Origin]]:
    """The services `up --profile lab` deploys, with where each profile is written: every
    registered service that has a `deploy:`, and every service `profiles_file` defines (a
    ConfigError naming the file and `services.<name>.deploy` for one without)."""
    profiles = load_profiles(profiles_file)
    where = origins(profiles, profiles_file)
    named = str(profiles_file) if profiles_file is not None else None
    chosen = [p for name, p in profiles.items() if p.deploy is not None or where[name].file == named]
    check_deployable(chosen, where)
    return chosen, where


def manifest_images(inventory: Path, contexts_dir: Path, profiles_file: Path | None = None
                    ) -> list[ImageBuild]:
    """The images the services role must build from `contexts_dir`/<dir>/Dockerfile for the
    services' generated manifests; a ConfigError, at the profile field that names it, for any image
    that nobody builds or that no registry in the inventory's `services_registries` serves."""
    inv = LabInventory.load(inventory)
    server = (inv.hosts("cluster_server") or [""])[0]
    registries = inv.var(server, "services_registries", [])
    if not isinstance(registries, list) or not all(isinstance(r, str) for r in registries):
        raise ConfigError([ConfigProblem(str(inventory), None, "services_registries",
                                         "must be a list of registry hosts, e.g. [docker.io]")])
    services, where = lab_services(profiles_file)
    return builds_for(deploy_image_uses(services, where), contexts_dir, registries)


def check_namespace(inventory: LabInventory, namespace: str = DEFAULT_NAMESPACE) -> None:
    """The namespace the services role applies to (the cluster server's `services_namespace`,
    default drafas) must be the one the manifests are generated for: a ConfigError at the
    inventory's line otherwise, before anything is written or applied."""
    for server in inventory.hosts("cluster_server"):
        value = inventory.var(server, "services_namespace")
        if value is not None and value != namespace:
            raise ConfigError([inventory.problem(
                server, "services_namespace",
                f"is {value!r}, but the services' manifests are generated for namespace "
                f"{namespace!r} (where `testbed run --profile lab` and the scaler look for the "
                f"Deployments): remove services_namespace or set it to {namespace!r}")])


def objects_outside(paths: list[Path], namespace: str) -> list[str]:
    """'file: Kind/name is in namespace X' for every object of `paths` not in `namespace`."""
    import yaml

    out = []
    for path in paths:
        for obj in yaml.safe_load_all(path.read_text()):
            if not obj:
                continue
            where = (obj.get("metadata") or {}).get("namespace")
            if where != namespace:
                name = (obj.get("metadata") or {}).get("name", "?")
                out.append(f"{path}: {obj.get('kind', '?')}/{name} is in namespace "
                           f"{where or '(none)'}")
    return out


def prepare_manifests(rendered: Path, profiles_file: Path | None = None,
                      namespace: str = DEFAULT_NAMESPACE) -> list[Path]:
    """`rendered`/workloads/<service>/k8s.yaml for every service `lab_services` names; every
    object in `namespace` (a StateError naming the first that is not)."""
    services, where = lab_services(profiles_file)
    dest = rendered / MANIFESTS_SUBDIR
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    paths = write_manifests(services, dest, namespace, where=where)
    elsewhere = objects_outside(paths, namespace)
    if elsewhere:
        raise StateError(f"{elsewhere[0]}, not {namespace}: the services role would apply it "
                         f"outside the lab's namespace")
    return paths


def lab_extravars(spec: TestbedSpec, run_dir: Path, rendered: Path,
                  contexts_dir: Path, images: list[ImageBuild] | None = None) -> dict[str, Any]:
    return {
        "testbed_spec": spec.model_dump(mode="json"),
        "testbed_rendered_dir": str(rendered.resolve()),
        "testbed_manifests_dir": str((rendered / MANIFESTS_SUBDIR).resolve()),
        "testbed_contexts_dir": str(contexts_dir.resolve()),
        "testbed_images": [{"image": b.image, "context": b.context} for b in images or []],
        "testbed_upf_instances": upf_instances(rendered),
        "testbed_gnb_address": gnb_address(rendered),
        "testbed_run_dir": str(run_dir.resolve()),
    }


def lab_up(spec: TestbedSpec, inventory: Path, check: bool = False, run_dir: Path | None = None,
           *, rendered_dir: Path | None = None, manifests_dir: Path | None = None,
           profiles_file: Path | None = None, console: Console | None = None) -> PlaybookResult:
    """Bring the lab up (site.yml); with `check`, Ansible's check mode changes nothing.
    `manifests_dir` holds the images' build contexts (<dir>/Dockerfile, default workloads/);
    the services deployed are the registry's and `profiles_file`'s (`lab_services`)."""
    manifests_dir = manifests_dir or REPO_ROOT / "workloads"
    if not manifests_dir.is_dir():
        raise MissingRequirement(f"service build contexts not found: {manifests_dir} "
                                 "(pass --manifests DIR)")
    images = manifest_images(inventory, manifests_dir, profiles_file)  # before anything is written
    lab_inventory = LabInventory.load(inventory)
    check_namespace(lab_inventory)
    require_ordered()  # each bring-up step after the steps that make its inputs
    # bad addresses stop here, before the run directory exists
    if rendered_dir is None:
        peer_addresses(spec, lab_inventory)
    elif lab_inventory.hosts(CORE_GROUP) and lab_inventory.hosts(RAN_GROUP):
        # a render from another inventory, or from none, would leave the gNB unable to reach
        # the core (without core and RAN hosts no address is used)
        check_rendered(rendered_dir, peer_addresses(spec, lab_inventory))
    run_dir = run_dir or new_run_dir(RUNS_DIR, "lab-check" if check else "lab-up")
    run_dir.mkdir(parents=True, exist_ok=True)
    rendered = prepare_rendered(spec, run_dir, rendered_dir, lab_inventory)
    prepare_manifests(rendered, profiles_file)
    extravars = lab_extravars(spec, run_dir, rendered, manifests_dir, images)
    (run_dir / "lab.json").write_text(json.dumps(
        {"inventory": str(Path(inventory).resolve()), "check": check, "extravars": extravars},
        indent=2))
    return run_playbook("site.yml", inventory=inventory, run_dir=run_dir, extravars=extravars,
                        check=check, console=console)


def lab_down(inventory: Path, run_dir: Path | None = None, *, check: bool = False,
             console: Console | None = None) -> PlaybookResult:
    """Undo `lab_up` (reset.yml); safe on a half-done bring-up and when run twice."""
    run_dir = run_dir or new_run_dir(RUNS_DIR, "lab-down")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_playbook("reset.yml", inventory=inventory, run_dir=run_dir,
                        extravars={"testbed_run_dir": str(run_dir.resolve())}, check=check,
                        console=console)


@dataclass
class LabStatus:
    units: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # host -> (unit, state)
    ue_addresses: dict[str, list[str]] = field(default_factory=dict)  # host -> uesimtun addresses
    # core host -> {"subscribers": the spec's in MongoDB, "expected": the spec's, "store_total": all}
    subscribers: dict[str, dict[str, int]] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)  # node -> allocatable GPU units
    replicas: dict[str, tuple[int, int]] = field(default_factory=dict)  # deployment -> (ready, want)
    prometheus_targets: dict[str, int] = field(default_factory=dict)  # health -> count
    problems: list[str] = field(default_factory=list)


def parse_status_events(events_file: Path, status: LabStatus) -> None:
    """Fill units, UE addresses and subscriber counts from status.yml's runner events."""
    for line in events_file.read_text().splitlines():
        ev = json.loads(line)
        if ev.get("event") != "runner_on_ok":
            continue
        data = ev.get("event_data") or {}
        host, task, res = data.get("host", "?"), data.get("task", ""), data.get("res") or {}
        if task == "List the testbed units":
            rows = [r.split() for r in res.get("stdout_lines", []) if r.strip()]
            status.units[host] = [(r[0], r[3] if len(r) > 3 else "?") for r in rows]
        elif task.startswith("List the UE addresses") and "stdout_lines" in res:
            addrs = [r.split()[3] for r in res["stdout_lines"] if "uesimtun" in r and len(r.split()) > 3]
            status.ue_addresses[host] = addrs
        elif task == "Count the testbed's subscribers in the core's MongoDB" and "rc" in res:
            if res["rc"] == 0:
                status.subscribers[host] = json.loads(res.get("stdout") or "{}")
            else:
                lines = (res.get("stderr") or "no output").strip().splitlines()
                status.problems.append(f"{host}: subscribers: {lines[-1]}")


def lab_status(inventory: Path, run_dir: Path, *, kubeconfig: Path | None = None,
               prometheus_url: str | None = None, namespace: str = DEFAULT_NAMESPACE,
               console: Console | None = None) -> LabStatus:
    """What runs on the lab; a part that cannot be reached becomes a line in `problems`."""
    status = LabStatus()
    result = run_playbook("status.yml", inventory=inventory, run_dir=run_dir, extravars={},
                          console=console)
    parse_status_events(result.events_file, status)
    kubeconfig = kubeconfig or run_dir / "kubeconfig"
    try:
        _cluster_status(kubeconfig, namespace, status)
    except Exception as exc:  # report, don't crash: the host part is still worth showing
        status.problems.append(f"cluster: {exc}")
    if prometheus_url:
        try:
            with urllib.request.urlopen(f"{prometheus_url.rstrip('/')}/api/v1/targets?state=active",
                                        timeout=10) as resp:
                doc = json.load(resp)
            for t in doc["data"]["activeTargets"]:
                status.prometheus_targets[t["health"]] = status.prometheus_targets.get(t["health"], 0) + 1
        except Exception as exc:
            status.problems.append(f"prometheus: {exc}")
    return status


def _cluster_status(kubeconfig: Path, namespace: str, status: LabStatus) -> None:
    from kubernetes import client, config

    if not kubeconfig.is_file():
        raise MissingRequirement(f"no kubeconfig at {kubeconfig} (lab_up saves it there)")
    config.load_kube_config(config_file=str(kubeconfig))
    core = client.CoreV1Api()
    for n in core.list_node(_request_timeout=10).items:
        status.nodes[n.metadata.name] = int((n.status.allocatable or {}).get("nvidia.com/gpu", 0))
    for d in client.AppsV1Api().list_namespaced_deployment(namespace, _request_timeout=10).items:
        status.replicas[d.metadata.name] = (d.status.ready_replicas or 0, d.spec.replicas or 0)
