"""The lab bring-up as a graph: each step's inputs exist before the step runs.

`site_steps` reads the real playbook and roles into the order Ansible runs their tasks (plays in
turn; in a play pre_tasks, roles, tasks, post_tasks; role files, include_role/import_role,
include_tasks/import_tasks and blocks expanded where they stand). `BRINGUP` names the steps that
make something another step needs (a step is a task of a role, found by its name) and what each
needs; `check_bringup` finds each step in that order and returns one line per need that comes
too late or per step that is gone. So an ordering mistake in site.yml or a role fails
tests/lab/test_graph.py, and `testbed up --profile lab`, before anything reaches a lab.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.errors import StateError
from testbed.paths import PLAYBOOKS_DIR

_INCLUDE_ROLE = ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role",
                 "import_role")
_INCLUDE_TASKS = ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks", "include_tasks",
                  "import_tasks")


@dataclass(frozen=True)
class Task:
    """One task where Ansible runs it: its play, the role whose file holds it, its name."""

    index: int
    play: str
    hosts: str
    role: str  # "" for a play's own tasks
    name: str
    file: str  # relative to the playbooks directory


@dataclass(frozen=True)
class Step:
    """A task that makes something (`makes`), found by `role` and `task` name."""

    key: str
    role: str
    task: str
    makes: str


@dataclass(frozen=True)
class Need:
    before: str  # the key of the step that must run first
    after: str
    why: str


# What the bring-up makes and who needs it. Task names are the roles' own: renaming one without
# changing it here is a line of its own ("no task ...").
STEPS = [
    Step("mongodb", "mongodb", "Wait for MongoDB to accept connections", "MongoDB accepting connections"),
    Step("subscribers", "subscribers", "Write the testbed's subscribers into the core's MongoDB",
         "the subscribers in the core's MongoDB"),
    Step("amf", "open5gs", "Wait until the AMF listens for NGAP on SCTP port 38412", "the AMF's NGAP"),
    Step("upfs", "upf", "Wait until every UPF is active", "the UPFs"),
    Step("ue_routes", "ue_routes", "Start the UE routes", "routes to the UE subnets"),
    Step("gnb", "ueransim", "Start the gNB", "the gNB"),
    Step("ues_start", "ueransim", "Start the UE groups", "the UEs"),
    Step("ues_wait", "ueransim", "Wait until every UE has a PDU session (one uesimtun device each)",
         "one PDU session per UE"),
    Step("k3s", "k3s_server", "Wait until this node is Ready", "the K3s server"),
    Step("k3s_agents", "k3s_agent", "Wait until this node is Ready in the cluster", "the K3s agents"),
    Step("docker", "docker", "Wait until the Docker API answers", "Docker on the K3s nodes"),
    Step("images", "services", "Import them into K3s's containerd", "the images in K3s's containerd"),
    Step("helm", "helm", "Install Helm", "Helm"),
    Step("device_plugin", "gpu_operator", "Wait until every GPU node advertises its MPS partitions",
         "the device plugin's nvidia.com/gpu units"),
    Step("istio", "istio", "Wait until istiod is available", "istiod (sidecar injection)"),
    Step("namespace_check", "services",
         "Check that every object of the manifests is in namespace {{ services_namespace }}",
         "the manifests' namespace checked"),
    Step("namespace", "services", "Apply the namespace", "the Istio-injected namespace"),
    Step("deployments", "services", "Apply the service manifests", "the Deployments and Services"),
    Step("services_ready", "services", "Wait until every service Deployment is available",
         "the services available"),
]

NEEDS = [
    Need("mongodb", "subscribers", "MongoDB before the subscribers"),
    Need("subscribers", "ues_wait", "the subscribers before the UEs' wait"),
    Need("subscribers", "ues_start", "the subscribers before the UEs register"),
    Need("amf", "gnb", "the AMF before the gNB's NG Setup"),
    Need("upfs", "ues_wait", "the UPFs before the UEs' PDU sessions"),
    Need("ue_routes", "ues_wait", "the routes to the UE subnets before the UEs are used"),
    Need("gnb", "ues_start", "the gNB before the UEs"),
    Need("k3s", "k3s_agents", "the K3s server before its agents join"),
    Need("k3s", "images", "K3s's containerd before the images are imported"),
    Need("k3s_agents", "images", "every K3s node before the images are imported on it"),
    Need("docker", "images", "Docker before the images are built"),
    Need("images", "deployments", "the images before the deployments"),
    Need("helm", "device_plugin", "Helm before the GPU operator's chart"),
    Need("helm", "istio", "Helm before the Istio charts"),
    Need("device_plugin", "deployments", "the device plugin before the GPU pods"),
    Need("istio", "namespace", "istiod before the injection-labelled namespace"),
    Need("namespace_check", "namespace", "the namespace check before anything is applied"),
    Need("namespace", "deployments", "the namespace before the manifests"),
    Need("deployments", "services_ready", "the manifests before the wait for the services"),
]


class _Reader:
    def __init__(self, playbooks_dir: Path):
        self.root = playbooks_dir
        self.tasks: list[Task] = []

    def load(self, path: Path) -> Any:
        try:
            return yaml.safe_load(path.read_text()) or []
        except OSError:
            raise StateError(f"{path}: missing (named by the bring-up's playbooks)") from None

    def role_file(self, role: str, tasks_from: str = "main") -> Path:
        name = tasks_from if tasks_from.endswith((".yml", ".yaml")) else f"{tasks_from}.yml"
        return self.root / "roles" / role / "tasks" / name

    def run_file(self, path: Path, play: dict[str, Any], role: str, stack: tuple[Path, ...]) -> None:
        if path in stack:
            return  # a recursive include: Ansible would loop, we read it once
        self.run_list(self.load(path), play, role, path, (*stack, path))

    def run_list(self, tasks: list[dict[str, Any]], play: dict[str, Any], role: str, path: Path,
                 stack: tuple[Path, ...]) -> None:
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            self.tasks.append(Task(len(self.tasks), str(play.get("name", "")), str(play.get("hosts", "")),
                                   role, str(task.get("name", "")), str(path.relative_to(self.root))))
            for part in ("block", "rescue", "always"):
                if part in task:
                    self.run_list(task[part], play, role, path, stack)
            for key in _INCLUDE_ROLE:
                if key in task:
                    spec = task[key]
                    self.run_file(self.role_file(spec["name"], spec.get("tasks_from", "main")),
                                  play, spec["name"], stack)
            for key in _INCLUDE_TASKS:
                if key in task:
                    target = task[key]
                    target = target.get("file") if isinstance(target, dict) else target
                    self.run_file(path.parent / str(target), play, role, stack)

    def run_playbook(self, playbook: str) -> list[Task]:
        for play in self.load(self.root / playbook):
            if "import_playbook" in play or "ansible.builtin.import_playbook" in play:
                self.run_playbook(play.get("import_playbook") or play["ansible.builtin.import_playbook"])
                continue
            self.run_list(play.get("pre_tasks") or [], play, "", self.root / playbook, ())
            for entry in play.get("roles") or []:
                role = entry if isinstance(entry, str) else entry.get("role") or entry.get("name")
                self.run_file(self.role_file(role), play, role, ())
            self.run_list(play.get("tasks") or [], play, "", self.root / playbook, ())
            self.run_list(play.get("post_tasks") or [], play, "", self.root / playbook, ())
        return self.tasks


def site_steps(playbooks_dir: Path = PLAYBOOKS_DIR, playbook: str = "site.yml") -> list[Task]:
    """Every task of `playbook` in the order Ansible runs it (conditions aside)."""
    return _Reader(Path(playbooks_dir)).run_playbook(playbook)


def locate(tasks: list[Task], step: Step) -> Task | None:
    """The first task of `step.role` named `step.task` (an include's own task counts)."""
    return next((t for t in tasks if t.role == step.role and t.name == step.task), None)


def check_bringup(playbooks_dir: Path = PLAYBOOKS_DIR, playbook: str = "site.yml",
                  steps: list[Step] | None = None, needs: list[Need] | None = None) -> list[str]:
    """One line per step that is gone and per need whose step runs too late; [] when in order."""
    tasks = site_steps(playbooks_dir, playbook)
    by_key = {s.key: s for s in steps or STEPS}
    found = {key: locate(tasks, s) for key, s in by_key.items()}
    problems = [f"{playbook}: no task {s.task!r} in role {s.role} ({s.makes}): renamed or moved? "
                f"(testbed/lab/graph.py names it)" for key, s in by_key.items() if found[key] is None]
    for need in needs or NEEDS:
        first, then = found.get(need.before), found.get(need.after)
        if first is None or then is None:
            continue
        if first.index >= then.index:
            problems.append(
                f"{playbook}: {need.why}: {then.role} task {then.name!r} (play {then.play!r}) runs "
                f"before {first.role} task {first.name!r} (play {first.play!r}), which makes "
                f"{by_key[need.before].makes}")
    return problems


def require_ordered(playbooks_dir: Path = PLAYBOOKS_DIR) -> None:
    """A StateError with the first ordering problem of site.yml, if any."""
    problems = check_bringup(playbooks_dir)
    if problems:
        raise StateError(problems[0])
