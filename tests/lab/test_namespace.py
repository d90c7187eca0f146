"""The services' objects land in the lab's namespace (issue 35): read from the generated manifests
and from the roles that apply them, as kubectl would place them; the inventory's namespace
checked before anything is written (Python) and before anything is applied (the role, run for
real by ansible-runner on a local connection)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from testbed.cluster.kubernetes import DEFAULT_NAMESPACE
from testbed.config import load_testbed
from testbed.errors import ConfigError, StateError
from testbed.lab.bringup import check_namespace, lab_up, objects_outside, prepare_manifests
from testbed.lab.inventory import LabInventory
from testbed.lab.runner import PLAYBOOKS_DIR, PlaybookFailed, run_playbook

ROLES = PLAYBOOKS_DIR / "roles"
PROFILES = """services:
  asr:
    capacity: 2
    queue_limit: 8
    proc_time_ms: [100, 300]
    startup_ms: 5000
    slo_ms: 1000
    deploy: {image: registry.lab:5000/asr:1, port: 8080, gpu: true}
"""


def _tasks(role: str, name: str) -> list[dict]:
    return yaml.safe_load((ROLES / role / "tasks" / name).read_text())


def _role_default(role: str, key: str) -> object:
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())[key]


def _apply_namespace() -> str | None:
    """The `-n` the services role gives `kubectl apply` for the service manifests (None: none),
    with the kubectl role's argv checked to pass it on."""
    task = next(t for t in _tasks("services", "main.yml") if t["name"] == "Apply the service manifests")
    apply = next(t for t in _tasks("kubectl", "apply.yml") if t["name"].startswith("Apply"))
    assert "kubectl_ns_args" in apply["ansible.builtin.command"]["argv"]
    value = task.get("vars", {}).get("kubectl_namespace")
    if value is None:
        return None
    assert value == "{{ services_namespace }}"
    return str(_role_default("services", "services_namespace"))


def landing(obj: dict, apply_namespace: str | None) -> str:
    """Where kubectl puts a namespaced object: its metadata.namespace, else the `-n` of the
    apply, else the kubeconfig's context namespace (K3s's: default)."""
    return (obj.get("metadata") or {}).get("namespace") or apply_namespace or "default"


def test_every_generated_object_lands_in_the_lab_namespace(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(PROFILES)
    files = prepare_manifests(tmp_path / "rendered", profiles)
    namespace = _apply_namespace()
    assert namespace == DEFAULT_NAMESPACE == _role_default("services", "services_namespace")
    objects = [(f, d) for f in files for d in yaml.safe_load_all(f.read_text()) if d]
    assert {f.parent.name for f, _ in objects} >= {"chatbot", "imgcls", "tts", "asr"}
    elsewhere = [f"{f.parent.name}: {d['kind']}/{d['metadata']['name']} -> {landing(d, namespace)}"
                 for f, d in objects if landing(d, namespace) != DEFAULT_NAMESPACE]
    assert not elsewhere
    # the namespace the services role creates, labelled for the sidecars, is that one too
    ns = yaml.safe_load((ROLES / "services" / "templates" / "namespace.yaml.j2").read_text()
                        .replace("{{ services_namespace }}", namespace).replace("{{ ansible_managed }}", ""))
    assert ns["metadata"] == {"name": DEFAULT_NAMESPACE, "labels": {"istio-injection": "enabled"}}


def test_the_check_catches_an_object_that_would_land_elsewhere() -> None:
    """What the test above guards against: no metadata.namespace and no -n is `default`."""
    bare = {"kind": "Deployment", "metadata": {"name": "x"}}
    assert landing(bare, None) == "default"
    assert landing(bare, DEFAULT_NAMESPACE) == DEFAULT_NAMESPACE
    assert landing({"kind": "Service", "metadata": {"name": "x", "namespace": "other"}},
                   DEFAULT_NAMESPACE) == "other"


def test_objects_outside_names_file_kind_and_namespace(tmp_path: Path) -> None:
    f = tmp_path / "k8s.yaml"
    f.write_text("kind: Service\nmetadata: {name: a, namespace: drafas}\n---\n"
                 "kind: Deployment\nmetadata: {name: b}\n")
    assert objects_outside([f], "drafas") == [f"{f}: Deployment/b is in namespace (none)"]


def test_the_namespace_check_comes_before_any_apply() -> None:
    names = [t["name"] for t in _tasks("services", "main.yml")]
    check = names.index("Check that every object of the manifests is in namespace "
                        "{{ services_namespace }}")
    applies = [i for i, t in enumerate(_tasks("services", "main.yml"))
               if (t.get("ansible.builtin.include_role") or {}).get("tasks_from") == "apply"]
    assert applies and check < min(applies)
    # the delete on `down` targets the same namespace
    delete = next(t for t in _tasks("services", "reset.yml") if t["name"] == "Delete the services")
    assert delete["vars"]["kubectl_namespace"] == "{{ services_namespace }}"


def _inventory(tmp_path: Path, namespace: str | None) -> Path:
    text = (PLAYBOOKS_DIR / "inventory.example.yml").read_text()
    if namespace is not None:
        text = text.replace("          ansible_host: gpu1.lab.example\n",
                            "          ansible_host: gpu1.lab.example\n"
                            f"          services_namespace: {namespace}\n")
    inv = tmp_path / "inventory.yml"
    inv.write_text(text)
    return inv


def test_an_inventory_with_another_namespace_stops_up_before_anything_is_written(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, "other")
    with pytest.raises(ConfigError) as err:
        check_namespace(LabInventory.load(inv))
    line = str(err.value)
    assert len(line.splitlines()) == 1
    assert "services_namespace" in line and "'other'" in line and "'drafas'" in line
    assert f"{inv}:" in line  # file:line
    with pytest.raises(ConfigError, match="services_namespace"):
        lab_up(load_testbed(), inv, check=True, run_dir=tmp_path / "run",
               console=Console(file=open("/dev/null", "w")))  # noqa: SIM115
    assert not (tmp_path / "run").exists()
    check_namespace(LabInventory.load(_inventory(tmp_path, None)))  # no variable: fine
    check_namespace(LabInventory.load(_inventory(tmp_path, "drafas")))


def test_prepare_manifests_refuses_objects_outside_the_namespace(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import testbed.lab.bringup as bringup

    real = bringup.write_manifests

    def without_namespace(*args, **kwargs):  # a generator that forgot metadata.namespace
        paths = real(*args, **kwargs)
        for p in paths:
            docs = [d for d in yaml.safe_load_all(p.read_text()) if d]
            for d in docs:
                d["metadata"].pop("namespace", None)
            p.write_text(yaml.safe_dump_all(docs))
        return paths

    monkeypatch.setattr(bringup, "write_manifests", without_namespace)
    with pytest.raises(StateError, match=r"is in namespace \(none\), not drafas"):
        prepare_manifests(tmp_path)


# ---- the role's check, run for real ------------------------------------------------------------
def _runner_or_skip() -> None:
    pytest.importorskip("ansible_runner", reason="the lab extra (ansible-runner) is not installed")
    if shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook is not on PATH (pip install ansible-core)")


def _check_play(tmp_path: Path, manifests: Path, namespace: str | None) -> Path:
    pb = tmp_path / "pb"
    pb.mkdir()
    (pb / "roles").symlink_to(ROLES)
    (pb / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    extra = f"\n        services_namespace: {namespace}" if namespace else ""
    (pb / "site.yml").write_text(f"""---
- name: The services role's namespace check
  hosts: cluster_server
  gather_facts: false
  tasks:
    - name: Check
      ansible.builtin.include_role:
        name: services
        tasks_from: check_namespace
      vars:
        testbed_manifests_dir: {manifests}{extra}
""")
    inv = tmp_path / "inventory.json"
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inv.write_text(json.dumps({"all": {"children": {"cluster_server": {"hosts": {"gpu1": local}}}}}))
    return pb


def test_the_role_stops_on_another_namespace_before_applying(tmp_path: Path) -> None:
    _runner_or_skip()
    manifests = tmp_path / "rendered" / "workloads"
    prepare_manifests(tmp_path / "rendered")
    quiet = Console(file=open("/dev/null", "w"))  # noqa: SIM115
    inv = tmp_path / "inventory.json"
    pb = _check_play(tmp_path, manifests, None)
    ok = run_playbook("site.yml", inventory=inv, run_dir=tmp_path / "ok", extravars={},
                      playbooks_dir=pb, console=quiet)
    assert ok.status == "successful"
    shutil.rmtree(pb)
    pb = _check_play(tmp_path, manifests, "other")
    with pytest.raises(PlaybookFailed) as err:
        run_playbook("site.yml", inventory=inv, run_dir=tmp_path / "bad", extravars={},
                     playbooks_dir=pb, console=quiet)
    f = err.value.failure
    assert f is not None and f.task == "Fail when an object would land outside the services namespace"
    assert len(f.message.splitlines()) == 1
    assert "k8s.yaml: " in f.message and "is in namespace drafas, not in services_namespace other" \
        in f.message and "nothing was applied" in f.message
