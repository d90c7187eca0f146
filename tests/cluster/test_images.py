"""Every image the service manifests (generated from the profiles' `deploy:`) name is built and
imported by the services role (or served by a registry the inventory names); an image nobody
provides is one line with file, line and field."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.cluster.images import ImageRef, image_builds, image_uses, manifest_files
from testbed.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / "workloads"
PLAYBOOKS = ROOT / "playbooks"
INVENTORY = PLAYBOOKS / "inventory.example.yml"

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: x}}
spec:
  selector: {{matchLabels: {{app: x}}}}
  template:
    metadata: {{labels: {{app: x}}}}
    spec:
      containers:
        - name: x
          image: {image}
{policy}"""


def _manifests(tmp_path: Path, image: str, policy: str | None = "Never",
               dockerfile: str | None = None) -> Path:
    (tmp_path / "x").mkdir()
    line = f"          imagePullPolicy: {policy}\n" if policy else ""
    (tmp_path / "x" / "k8s.yaml").write_text(DEPLOYMENT.format(image=image, policy=line))
    if dockerfile:
        (tmp_path / dockerfile).mkdir(exist_ok=True)
        (tmp_path / dockerfile / "Dockerfile").write_text("FROM scratch\n")
    return tmp_path


def _registries() -> list[str]:
    """The example inventory's services_registries (the role's default where it names none)."""
    doc = yaml.safe_load(INVENTORY.read_text())
    defaults = yaml.safe_load((PLAYBOOKS / "roles/services/defaults/main.yml").read_text())
    return doc["all"].get("vars", {}).get("services_registries", defaults["services_registries"])


USER_PROFILES = """\
services:
  {name}:
    capacity: 1
    queue_limit: 4
    proc_time_ms: [100, 300]
    startup_ms: 5000
    slo_ms: 800
    deploy: {{image: {image}, port: 8080, gpu: true}}
"""


def _user_profiles(tmp_path: Path, name: str = "asr", image: str = "example/asr:1") -> Path:
    path = tmp_path / "profiles.yaml"
    path.write_text(USER_PROFILES.format(name=name, image=image))
    return path


def test_every_registered_service_with_a_deploy_gets_a_deployment_whose_images_are_built_or_pulled(
        tmp_path: Path):
    from testbed.lab.bringup import prepare_manifests
    from testbed.profiles import default_profiles

    prepare_manifests(tmp_path)
    manifests = tmp_path / "workloads"
    uses = [u for f in manifest_files(manifests) for u in image_uses(f)]
    deployed = {f"Deployment/{n}" for n, p in default_profiles().items() if p.deploy is not None}
    assert {"Deployment/chatbot", "Deployment/imgcls", "Deployment/tts"} <= deployed
    assert {u.owner for u in uses} == deployed
    builds = {b.image: b for b in image_builds(manifests, _registries(), contexts_dir=WORKLOADS)}
    for use in uses:
        if use.image in builds:
            assert (WORKLOADS / builds[use.image].context / "Dockerfile").is_file()
            assert use.pull_policy in ("Never", "IfNotPresent"), use
        else:
            assert ImageRef.parse(use.image).registry in _registries(), use
        assert ImageRef.parse(use.image).pinned, f"{use.image}: a version, not latest"


def test_a_service_of_a_users_profile_file_gets_its_deployment_too(tmp_path: Path):
    from testbed.lab.bringup import lab_services, prepare_manifests
    from testbed.profiles import default_profiles

    profiles = _user_profiles(tmp_path)
    services, where = lab_services(profiles)
    assert [p.name for p in services][-1] == "asr" and where["asr"].file == str(profiles)
    assert where["asr"].line == 2 and where["imgcls"].file == "testbed/profiles/services.yaml"
    paths = prepare_manifests(tmp_path / "rendered", profiles)
    assert len(paths) == len([p for p in default_profiles().values() if p.deploy]) + 1
    uses = [u for f in manifest_files(tmp_path / "rendered" / "workloads") for u in image_uses(f)]
    asr = [u for u in uses if u.owner == "Deployment/asr"]
    assert [(u.image, u.pull_policy) for u in asr] == [("example/asr:1", "IfNotPresent"),
                                                      ("testbed/meter:v1", "Never")]
    (doc,) = [d for d in yaml.safe_load_all((tmp_path / "rendered/workloads/asr/k8s.yaml").read_text())
              if d["kind"] == "Deployment"]
    assert doc["metadata"]["namespace"] == "drafas"


def test_a_service_of_a_users_file_without_deploy_stops_up_naming_the_field(tmp_path: Path):
    from testbed.lab.bringup import lab_services

    profiles = _user_profiles(tmp_path)
    profiles.write_text(profiles.read_text().replace("    deploy: {image: example/asr:1, port: 8080, "
                                                     "gpu: true}\n", ""))
    with pytest.raises(ConfigError) as err:
        lab_services(profiles)
    (problem,) = err.value.problems
    assert str(problem).startswith(f"{profiles}:2: services.asr.deploy: service 'asr' has no lab "
                                   "container")


def _task(tasks: list[dict], argv_head: list[str]) -> dict:
    (task,) = [t for t in tasks
               if t.get("ansible.builtin.command", {}).get("argv", [])[:len(argv_head)] == argv_head]
    return task


def test_the_services_role_builds_and_imports_what_lab_up_lists_on_every_k3s_node(tmp_path: Path):
    """The chain from the profiles to the nodes: `lab up` writes the generated manifests (applied
    from testbed_manifests_dir) and passes their images as testbed_images;
    images.yml builds each with Docker and imports it with `k3s ctr images import`; site.yml runs
    it on every K3s node after installing Docker."""
    from testbed.lab.bringup import lab_extravars, manifest_images, prepare_manifests, prepare_rendered
    from testbed.lab.inventory import LabInventory

    images = manifest_images(INVENTORY, WORKLOADS)
    rendered = prepare_rendered(_spec(), tmp_path, None, LabInventory.load(INVENTORY))
    prepare_manifests(rendered)
    extravars = lab_extravars(_spec(), tmp_path, rendered, WORKLOADS, images)
    extra = extravars["testbed_images"]
    manifests = Path(extravars["testbed_manifests_dir"])
    assert manifests == (rendered / "workloads").resolve()
    assert Path(extravars["testbed_contexts_dir"]) == WORKLOADS
    assert sorted(extra, key=str) == sorted(({"image": b.image, "context": b.context}
                                             for b in image_builds(manifests, contexts_dir=WORKLOADS)),
                                            key=str)
    assert {"testbed/imgcls:v1", "testbed/meter:v1"} <= {b["image"] for b in extra}
    tasks = yaml.safe_load((PLAYBOOKS / "roles/services/tasks/images.yml").read_text())
    copy = next(t for t in tasks if "ansible.builtin.copy" in t)
    assert copy["ansible.builtin.copy"]["src"] == "{{ testbed_contexts_dir }}/{{ item.context }}/"
    build = _task(tasks, ["docker", "build"])
    assert build["loop"] == "{{ testbed_images }}"
    assert "{{ item.image }}" in build["ansible.builtin.command"]["argv"]
    imported = _task(tasks, ["k3s", "ctr", "images", "import"])
    assert imported["loop"].startswith("{{ testbed_images")
    plays = yaml.safe_load((PLAYBOOKS / "site.yml").read_text())
    (play,) = [p for p in plays if any(t.get("ansible.builtin.include_role", {}) ==
                                       {"name": "services", "tasks_from": "images"}
                                       for t in p.get("tasks", []))]
    assert set(play["hosts"].split(":")) == {"cluster_server", "cluster_agents"}
    assert "docker" in play["roles"]
    services_play = next(i for i, p in enumerate(plays) if "services" in p.get("roles", []))
    assert plays.index(play) < services_play, "images before the manifests are applied"


def _spec():
    from testbed.config import load_testbed

    return load_testbed()


def test_an_image_nobody_builds_is_one_line_with_file_line_and_field(tmp_path: Path):
    manifests = _manifests(tmp_path, "acme/unknown:1.2", policy=None)
    with pytest.raises(ConfigError) as err:
        image_builds(manifests, ["registry.lab.example:5000"])
    (problem,) = err.value.problems
    assert (problem.file, problem.line, problem.field) == (
        str(manifests / "x" / "k8s.yaml"), 11, "spec.template.spec.containers[0].image")
    assert str(problem).startswith(f"{manifests}/x/k8s.yaml:11: spec.template.spec.containers[0]"
                                   ".image: Deployment/x: image 'acme/unknown:1.2': no role builds")
    assert "docker.io is not in the inventory's services_registries" in str(problem)
    # the same image is fine once the inventory names its registry
    assert image_builds(manifests, ["docker.io"]) == []


@pytest.mark.parametrize("image, policy, dockerfile, message", [
    ("testbed/x:v1", "Never", None, "no role builds it"),  # no x/Dockerfile
    ("testbed/x:latest", "Never", "x", "version tag"),
    ("testbed/x", "Never", "x", "version tag"),
    ("testbed/x:v1", "Always", "x", "Always: the image 'testbed/x:v1' is built on the nodes"),
    ("testbed/x:v1", None, "x", "unset: the image"),
    ("docker.io/library/nginx:latest", None, None, "pin a tag or digest"),
    ('""', None, None, "Deployment/x: no image"),
])
def test_images_a_pod_would_pull_or_nobody_builds_are_refused(tmp_path, image, policy, dockerfile,
                                                              message):
    manifests = _manifests(tmp_path, image, policy, dockerfile)
    with pytest.raises(ConfigError, match=message):
        image_builds(manifests, ["docker.io"])


def test_a_built_image_with_a_version_and_never_pull_is_listed(tmp_path: Path):
    manifests = _manifests(tmp_path, "testbed/x:v2", "IfNotPresent", "x")
    (build,) = image_builds(manifests)
    assert (build.image, build.context) == ("testbed/x:v2", "x")


def test_image_references_parse_like_docker():
    assert ImageRef.parse("testbed/imgcls:v1") == ImageRef("docker.io", "testbed/imgcls", "v1", None)
    assert ImageRef.parse("registry.lab:5000/a/b") == ImageRef("registry.lab:5000", "a/b", None, None)
    assert ImageRef.parse("localhost/a:1@sha256:ab").digest == "sha256:ab"
    assert not ImageRef.parse("ollama/ollama").pinned and ImageRef.parse("ollama/ollama:0.5.7").pinned


def test_up_profile_lab_with_an_unknown_image_prints_one_line_and_creates_nothing(tmp_path: Path):
    profiles = _user_profiles(tmp_path, "x", "acme/unknown:1.2")
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "testbed", "up", "--profile", "lab", "-i", str(INVENTORY),
                           "--profiles", str(profiles), "--check"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert f"{profiles}:2: services.x.deploy.image: Deployment/x: image 'acme/unknown:1.2': " \
           "no role builds it" in lines[0]
    assert list(work.iterdir()) == [], "no run directory"


def test_a_manifest_that_is_not_yaml_is_one_line_with_its_line(tmp_path: Path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "k8s.yaml").write_text("kind: Deployment\nspec: [unclosed\n")
    with pytest.raises(ConfigError, match=r"x/k8s.yaml:3: invalid YAML"):
        image_builds(tmp_path)


def test_services_registries_must_be_a_list_of_hosts(tmp_path: Path):
    from testbed.lab.bringup import manifest_images

    inventory = tmp_path / "inv.yml"
    inventory.write_text("all:\n  vars: {services_registries: docker.io}\n"
                         "  children: {cluster_server: {hosts: {gpu1: {}}}}\n")
    with pytest.raises(ConfigError, match=r"inv.yml: services_registries: must be a list"):
        manifest_images(inventory, WORKLOADS)
