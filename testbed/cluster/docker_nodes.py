"""UEs' traffic endpoints and iperf3 servers as Docker containers, through the Docker API (not the CLI).

Every container carries the label `testbed=1` (and `testbed.run=<run>`) and a `tb-` name prefix,
so cleanup -- here and in playbooks/reset.yml -- touches only what the testbed started.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from testbed.errors import MissingRequirement, StateError

LABEL = "testbed"
PREFIX = "tb-"


@dataclass(frozen=True)
class ContainerSpec:
    """One endpoint container: what to run and how it joins the network."""

    name: str  # without the tb- prefix
    image: str
    command: Sequence[str] | None = None
    network_mode: str | None = "host"  # iperf3 and UE-side tools use the host's (UE) interfaces
    cap_add: tuple[str, ...] = ()
    environment: dict[str, str] = field(default_factory=dict)

    @property
    def container_name(self) -> str:
        return self.name if self.name.startswith(PREFIX) else PREFIX + self.name


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    output: str


def iperf3_server(port: int, image: str = "networkstatic/iperf3:latest") -> ContainerSpec:
    return ContainerSpec(f"iperf3-{port}", image, ["-s", "-p", str(port)])


class DockerNodes:
    """Start, exec in and stop the testbed's containers on one Docker host."""

    def __init__(self, client: Any, run: str = "default"):
        self.client = client
        self.run = run

    @classmethod
    def connect(cls, base_url: str | None = None, run: str = "default",
                from_env: Callable[..., Any] | None = None) -> DockerNodes:
        """`base_url` like ssh://user@traffic1 or unix:///var/run/docker.sock; default: DOCKER_HOST."""
        try:
            import docker
        except ImportError:
            raise MissingRequirement("Docker endpoints need the `docker` package: "
                                     "pip install 'testbed[lab]'") from None
        try:
            client = docker.DockerClient(base_url=base_url) if base_url else (from_env or docker.from_env)()
            client.ping()
        except docker.errors.DockerException as exc:
            raise MissingRequirement(f"no Docker engine at {base_url or 'DOCKER_HOST'}: {exc}") from None
        return cls(client, run)

    def labels(self) -> dict[str, str]:
        return {LABEL: "1", f"{LABEL}.run": self.run}

    def start(self, spec: ContainerSpec) -> str:
        """Start (or replace) the container; returns its id."""
        self.stop(spec.name)
        kwargs: dict[str, Any] = {"name": spec.container_name, "detach": True,
                                  "labels": self.labels(), "environment": dict(spec.environment),
                                  "cap_add": list(spec.cap_add) or None}
        if spec.network_mode:
            kwargs["network_mode"] = spec.network_mode
        container = self.client.containers.run(spec.image, list(spec.command) if spec.command else None,
                                               **kwargs)
        return container.id

    def exec(self, name: str, argv: Sequence[str]) -> ExecResult:
        """Run an argument list in a running container (no shell)."""
        container = self._get(name)
        if container is None:
            raise StateError(f"container {PREFIX + name.removeprefix(PREFIX)} is not running")
        code, out = container.exec_run(list(argv), demux=False)
        return ExecResult(int(code), (out or b"").decode(errors="replace"))

    def stop(self, name: str, timeout_s: int = 5) -> bool:
        """Stop and remove one container if it exists; True when something was removed."""
        container = self._get(name)
        if container is None:
            return False
        self._stop_remove(container, timeout_s)
        return True

    def stop_all(self) -> int:
        """Remove every container of this run (label testbed.run)."""
        found = self.client.containers.list(all=True, filters={"label": f"{LABEL}.run={self.run}"})
        for c in found:
            self._stop_remove(c, 5)
        return len(found)

    def _stop_remove(self, container: Any, timeout_s: int) -> None:
        try:
            container.stop(timeout=timeout_s)
        finally:
            container.remove(force=True, v=True)

    def _get(self, name: str) -> Any | None:
        full = name if name.startswith(PREFIX) else PREFIX + name
        found = self.client.containers.list(all=True, filters={"name": f"^/{full}$", "label": LABEL})
        return found[0] if found else None
