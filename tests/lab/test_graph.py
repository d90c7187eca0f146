"""The bring-up as a graph, read from the real site.yml and roles: in order as they stand, and
each ordering mistake of issue 35's list, made in a copy of the playbooks, is a failing line."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from testbed.errors import StateError
from testbed.lab.graph import STEPS, check_bringup, locate, require_ordered, site_steps
from testbed.lab.runner import PLAYBOOKS_DIR


def test_the_real_bringup_is_in_order() -> None:
    assert check_bringup() == []
    require_ordered()


def test_every_step_is_found_where_ansible_runs_it() -> None:
    tasks = site_steps()
    for step in STEPS:
        assert locate(tasks, step) is not None, step
    # include_role ... tasks_from expanded where it stands: kubectl's apply follows the include
    names = [(t.role, t.name) for t in tasks]
    ns = names.index(("services", "Apply the namespace"))
    assert names[ns + 1] == ("kubectl", "Compare the cluster with the manifests - "
                                        "{{ kubectl_path | basename }}")
    # blocks expanded: the load client's unpack is inside a block of install.yml
    assert ("load_client", "Unpack the package on the host") in names
    # the subscribers are written on the core host, in the core's play
    sub = locate(tasks, next(s for s in STEPS if s.key == "subscribers"))
    assert sub is not None and sub.hosts == "core"


def _copy(tmp_path: Path) -> Path:
    dest = tmp_path / "playbooks"
    shutil.copytree(PLAYBOOKS_DIR, dest)
    return dest


def _edit(path: Path, change: Callable[[list], None]) -> None:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _play(doc: list, start: str) -> dict:
    return next(p for p in doc if p["name"].startswith(start))


def _swap_roles(start: str, first: str, second: str) -> Callable[[list], None]:
    def change(doc: list) -> None:
        roles = _play(doc, start)["roles"]
        names = [r if isinstance(r, str) else r["role"] for r in roles]
        i, j = names.index(first), names.index(second)
        roles[i], roles[j] = roles[j], roles[i]
    return change


def _move_play(start: str, before: str) -> Callable[[list], None]:
    def change(doc: list) -> None:
        play = _play(doc, start)
        doc.remove(play)
        doc.insert(doc.index(_play(doc, before)), play)
    return change


def _move_play_after(start: str, after: str) -> Callable[[list], None]:
    def change(doc: list) -> None:
        play = _play(doc, start)
        doc.remove(play)
        doc.insert(doc.index(_play(doc, after)) + 1, play)
    return change


def _drop_role(start: str, role: str) -> Callable[[list], None]:
    def change(doc: list) -> None:
        _play(doc, start)["roles"].remove(role)
    return change


@pytest.mark.parametrize(("change", "line"), [
    (_swap_roles("5G core", "mongodb", "subscribers"), "MongoDB before the subscribers"),
    (_move_play("RAN", "5G core"), "the subscribers before the UEs' wait"),
    (_move_play_after("Workload images", "Cluster add-ons"), "the images before the deployments"),
    (_swap_roles("Cluster add-ons", "gpu_operator", "services"), "the device plugin before the GPU pods"),
    (_drop_role("5G core", "subscribers"),
     "no task \"Write the testbed's subscribers into the core's MongoDB\" in role subscribers"),
], ids=["mongodb-subscribers", "subscribers-ues", "images-deployments", "plugin-gpu-pods",
        "no-subscriber-step"])
def test_an_ordering_mistake_in_site_yml_fails(tmp_path: Path, change: Callable[[list], None],
                                               line: str) -> None:
    pb = _copy(tmp_path)
    _edit(pb / "site.yml", change)
    problems = check_bringup(pb)
    assert problems and any(line in p for p in problems), problems
    with pytest.raises(StateError):
        require_ordered(pb)


def test_the_namespace_after_the_manifests_fails(tmp_path: Path) -> None:
    pb = _copy(tmp_path)

    def swap(tasks: list) -> None:
        names = [t["name"] for t in tasks]
        i, j = names.index("Apply the namespace"), names.index("Apply the service manifests")
        tasks[i], tasks[j] = tasks[j], tasks[i]

    _edit(pb / "roles" / "services" / "tasks" / "main.yml", swap)
    (problem,) = check_bringup(pb)
    assert problem.startswith("site.yml: the namespace before the manifests: services task "
                              "'Apply the service manifests'")
