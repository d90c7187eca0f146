"""Where the lab gets every image the service manifests name: built from the manifests' own
Dockerfiles and imported into K3s, or pulled from a registry the inventory names.

An image `testbed/<dir>:<tag>` is built from `<manifests>/<dir>/Dockerfile` by the services role
(playbooks/roles/services/tasks/images.yml: `docker build`, then `k3s ctr images import` on every
K3s node); its pods must never pull it (`imagePullPolicy: Never` or `IfNotPresent`) and its tag
must be a version, not `latest` (with `latest` the kubelet always pulls). Any other image must
come from a registry in the inventory's `services_registries`, pinned to a tag or digest.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from testbed.config.yamlfile import format_path, read_config_text
from testbed.errors import ConfigError, ConfigProblem

BUILT_PREFIX = "testbed/"  # the repository of every image the lab builds itself
BUILT_PULL_POLICIES = ("Never", "IfNotPresent")
DEFAULT_REGISTRY = "docker.io"  # where a reference without a registry host points
MANIFEST_GLOB = "*/k8s.yaml"

# Where each kind keeps its pod spec.
_POD_SPEC = {"Pod": ("spec",), "Deployment": ("spec", "template", "spec"),
             "StatefulSet": ("spec", "template", "spec"), "DaemonSet": ("spec", "template", "spec"),
             "ReplicaSet": ("spec", "template", "spec"), "Job": ("spec", "template", "spec"),
             "CronJob": ("spec", "jobTemplate", "spec", "template", "spec")}


@dataclass(frozen=True)
class ImageUse:
    """One container's image in a manifest, with where it stands."""

    file: Path
    line: int | None  # None: a generated manifest's image, placed at its profile field
    field: str  # e.g. spec.template.spec.containers[0].image
    owner: str  # e.g. Deployment/imgcls
    image: str
    pull_policy: str | None
    pull_policy_line: int | None


@dataclass(frozen=True)
class ImageBuild:
    """An image the services role builds: `context` is its directory under the manifests dir."""

    image: str
    context: str


@dataclass(frozen=True)
class ImageRef:
    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, ref: str) -> ImageRef:
        """Docker's reference form: [registry/]repository[:tag][@digest]."""
        name, _, digest = ref.partition("@")
        head, _, rest = name.partition("/")
        if rest and ("." in head or ":" in head or head == "localhost"):
            registry, path = head, rest
        else:
            registry, path = DEFAULT_REGISTRY, name
        last = path.rsplit("/", 1)[-1]
        tag = last.partition(":")[2] or None
        repository = path[: len(path) - len(tag) - 1] if tag else path
        return cls(registry, repository, tag, digest or None)

    @property
    def pinned(self) -> bool:
        return self.digest is not None or self.tag not in (None, "latest")


def manifest_files(manifests_dir: Path) -> list[Path]:
    return sorted(manifests_dir.glob(MANIFEST_GLOB))


def image_uses(path: Path) -> list[ImageUse]:
    """Every container and init container image in one (multi-document) manifest file."""
    text = read_config_text(path, "a Kubernetes manifest")
    try:
        docs = [d for d in yaml.compose_all(text, Loader=yaml.SafeLoader) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError([ConfigProblem(str(path), mark.line + 1 if mark else None, "",
                                         f"invalid YAML: {getattr(exc, 'problem', None) or exc}")]
                          ) from None
    out = []
    for doc in docs:
        kind = _scalar(_child(doc, "kind"))
        pod = _walk(doc, _POD_SPEC.get(str(kind), ()))
        if kind not in _POD_SPEC or pod is None:
            continue
        owner = f"{kind}/{_scalar(_walk(doc, ('metadata', 'name')))}"
        prefix = _POD_SPEC[str(kind)]
        for key in ("initContainers", "containers"):
            for i, container in enumerate(_items(_child(pod, key))):
                image = _child(container, "image")
                policy = _child(container, "imagePullPolicy")
                out.append(ImageUse(
                    path, (image or container).start_mark.line + 1,
                    format_path((*prefix, key, i, "image")), owner,
                    str(_scalar(image) or ""), None if policy is None else str(_scalar(policy)),
                    None if policy is None else policy.start_mark.line + 1))
    return out


def image_builds(manifests_dir: Path, registries: Iterable[str] = (),
                 contexts_dir: Path | None = None) -> list[ImageBuild]:
    """The images the lab must build for `manifests_dir`'s manifests; a ConfigError naming file,
    line and field for every image that nobody builds or serves, or that a pod would pull.
    Build contexts are `contexts_dir`/<dir> (default: beside the manifests)."""
    uses = [use for path in manifest_files(manifests_dir) for use in image_uses(path)]
    return builds_for(uses, contexts_dir or manifests_dir, registries)


def builds_for(uses: Iterable[ImageUse], contexts_dir: Path,
               registries: Iterable[str] = ()) -> list[ImageBuild]:
    """The images to build for `uses` from `contexts_dir`/<dir>/Dockerfile; a ConfigError with
    one problem for each image that nobody builds or serves, or that a pod would pull."""
    allowed = set(registries)
    builds: dict[str, ImageBuild] = {}
    problems = []
    for use in uses:
        build, problem = _source(use, contexts_dir, allowed)
        if problem:
            problems.append(problem)
        elif build:
            builds.setdefault(build.image, build)
    if problems:
        raise ConfigError(problems)
    return list(builds.values())


def _source(use: ImageUse, manifests_dir: Path, registries: set[str]
            ) -> tuple[ImageBuild | None, ConfigProblem | None]:
    def problem(message: str, line: int | None = None, field: str | None = None) -> ConfigProblem:
        return ConfigProblem(str(use.file), line or use.line, field or use.field,
                             f"{use.owner}: {message}")

    if not use.image:
        return None, problem("no image")
    ref = ImageRef.parse(use.image)
    context = ref.repository.removeprefix(BUILT_PREFIX)
    if use.image.startswith(BUILT_PREFIX):
        if not (manifests_dir / context / "Dockerfile").is_file():
            return None, problem(f"image {use.image!r}: no role builds it (images {BUILT_PREFIX}"
                                 f"<dir>:<tag> are built from {manifests_dir}/<dir>/Dockerfile, "
                                 f"and there is no {context}/Dockerfile)")
        if not ref.pinned or ref.digest:
            return None, problem(f"image {use.image!r}: give the image we build a version tag "
                                 "(with none or `latest` the kubelet pulls it from a registry)")
        if use.pull_policy not in BUILT_PULL_POLICIES:
            field = use.field.removesuffix("image") + "imagePullPolicy"
            return None, problem(f"{use.pull_policy or 'unset'}: the image {use.image!r} is built "
                                 "on the nodes and exists in no registry; set "
                                 f"{' or '.join(BUILT_PULL_POLICIES)}", use.pull_policy_line, field)
        return ImageBuild(use.image, context), None
    if ref.registry not in registries:
        named = ", ".join(sorted(registries)) or "none"
        return None, problem(f"image {use.image!r}: no role builds it and its registry "
                             f"{ref.registry} is not in the inventory's services_registries "
                             f"({named}); build it as {BUILT_PREFIX}<dir>:<tag> from "
                             f"{manifests_dir}/<dir>/Dockerfile or name its registry")
    if not ref.pinned:
        return None, problem(f"image {use.image!r}: pin a tag or digest (not `latest`)")
    return None, None


def _child(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    return next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key),
                None)


def _walk(node: yaml.Node | None, path: Iterable[str]) -> yaml.Node | None:
    for key in path:
        node = _child(node, key)
    return node


def _items(node: yaml.Node | None) -> Iterator[yaml.Node]:
    return iter(node.value) if isinstance(node, yaml.SequenceNode) else iter(())


def _scalar(node: yaml.Node | None) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None
