"""DockerNodes: the Docker API calls it makes, against a fake client defined here; a real engine if any."""

from __future__ import annotations

import pytest

from testbed.cluster.docker_nodes import ContainerSpec, DockerNodes, iperf3_server
from testbed.errors import MissingRequirement, StateError


class FakeContainer:
    def __init__(self, client: FakeDockerClient, name: str, labels: dict[str, str]):
        self.client, self.name, self.labels, self.id = client, name, labels, f"id-{name}"
        self.execs: list[list[str]] = []

    def exec_run(self, cmd: list[str], demux: bool = False) -> tuple[int, bytes]:
        self.execs.append(cmd)
        return (0, b"iperf 3.16\n")

    def stop(self, timeout: int) -> None:
        self.client.log.append(("stop", self.name))

    def remove(self, force: bool, v: bool) -> None:
        self.client.log.append(("remove", self.name))
        self.client.items.remove(self)


class FakeContainers:
    def __init__(self, client: FakeDockerClient):
        self.client = client

    def run(self, image: str, command: list[str] | None, **kw: object) -> FakeContainer:
        self.client.log.append(("run", image, command, kw))
        c = FakeContainer(self.client, str(kw["name"]), dict(kw["labels"]))  # type: ignore[arg-type]
        self.client.items.append(c)
        return c

    def list(self, all: bool, filters: dict[str, str]) -> list[FakeContainer]:
        out = list(self.client.items)
        if "name" in filters:
            out = [c for c in out if f"^/{c.name}$" == filters["name"]]
        if "label" in filters:
            key, _, value = filters["label"].partition("=")
            out = [c for c in out if key in c.labels and (not value or c.labels[key] == value)]
        return out


class FakeDockerClient:
    """Stands in for docker.DockerClient: the `containers` collection only."""

    def __init__(self) -> None:
        self.items: list[FakeContainer] = []
        self.log: list[tuple] = []
        self.containers = FakeContainers(self)


def test_start_labels_names_and_replaces() -> None:
    client = FakeDockerClient()
    nodes = DockerNodes(client, run="r1")
    nodes.start(iperf3_server(5202))
    run = client.log[0]
    assert run[:3] == ("run", "networkstatic/iperf3:latest", ["-s", "-p", "5202"])
    assert run[3]["name"] == "tb-iperf3-5202" and run[3]["network_mode"] == "host"
    assert run[3]["labels"] == {"testbed": "1", "testbed.run": "r1"}
    nodes.start(iperf3_server(5202))  # same name again: the old one is removed first
    assert [e[0] for e in client.log] == ["run", "stop", "remove", "run"]
    assert len(client.items) == 1


def test_exec_takes_argument_lists_and_stop_all_is_scoped_to_the_run() -> None:
    client = FakeDockerClient()
    nodes = DockerNodes(client, run="r1")
    nodes.start(ContainerSpec("ue-ai-1", "alpine", ["sleep", "inf"], cap_add=("NET_ADMIN",)))
    res = nodes.exec("ue-ai-1", ["iperf3", "--version"])
    assert res.exit_code == 0 and "iperf" in res.output
    assert client.items[0].execs == [["iperf3", "--version"]]
    with pytest.raises(StateError, match="tb-nope is not running"):
        nodes.exec("nope", ["true"])
    DockerNodes(client, run="other").start(ContainerSpec("x", "alpine"))
    assert nodes.stop_all() == 1
    assert [c.name for c in client.items] == ["tb-x"]
    assert nodes.stop("ue-ai-1") is False


def test_real_engine_or_skip() -> None:
    docker = pytest.importorskip("docker", reason="the lab extra (docker) is not installed")
    try:
        nodes = DockerNodes.connect()
    except MissingRequirement as exc:
        pytest.skip(f"no Docker engine here: {exc}")
    try:
        nodes.start(ContainerSpec("selftest", "alpine:3", ["sleep", "30"], network_mode=None))
        assert nodes.exec("selftest", ["echo", "hi"]).output.strip() == "hi"
    except docker.errors.ImageNotFound:
        pytest.skip("alpine:3 image not available offline")
    finally:
        nodes.stop_all()
