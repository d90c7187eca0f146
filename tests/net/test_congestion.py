"""The congestion control a testbed's namespaces are given: the host's allowed list is widened only
while they are set up, and an algorithm the kernel lacks is a clear error. Unit tests run on a
stand-in for /proc/sys/net/ipv4 (fake files); the root test sets real namespaces."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from testbed.bringup.local import LocalTestbed
from testbed.config import load_testbed
from testbed.errors import MissingRequirement
from testbed.net.cmd import in_ns
from testbed.net.congestion import SYSCTL, allowed_while_building, available


class NoModprobe:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def run(self, argv, check=True, **kw):
        self.calls.append(list(argv))


def _fake_sysctl(tmp_path: Path, available: str, allowed: str) -> Path:
    (tmp_path / "tcp_available_congestion_control").write_text(available + "\n")
    (tmp_path / "tcp_allowed_congestion_control").write_text(allowed + "\n")
    return tmp_path


def test_the_allowed_list_is_widened_while_building_and_restored_after(tmp_path):
    fake = _fake_sysctl(tmp_path, "reno cubic bbr", "reno cubic")
    allowed = fake / "tcp_allowed_congestion_control"
    with allowed_while_building("bbr", NoModprobe(), fake):
        assert allowed.read_text().split() == ["reno", "cubic", "bbr"]
    assert allowed.read_text().split() == ["reno", "cubic"]
    with pytest.raises(RuntimeError), allowed_while_building("bbr", NoModprobe(), fake):
        raise RuntimeError("a failed build")
    assert allowed.read_text().split() == ["reno", "cubic"]  # restored on failure too


def test_an_allowed_algorithm_or_none_changes_nothing(tmp_path):
    fake = _fake_sysctl(tmp_path, "reno cubic", "reno cubic")
    for algorithm in ("cubic", None):
        with allowed_while_building(algorithm, NoModprobe(), fake):
            assert (fake / "tcp_allowed_congestion_control").read_text() == "reno cubic\n"


def test_an_algorithm_the_kernel_lacks_is_tried_as_a_module_then_refused(tmp_path):
    fake = _fake_sysctl(tmp_path, "reno cubic", "reno cubic")
    runner = NoModprobe()
    with (pytest.raises(MissingRequirement, match=r"no TCP congestion control 'bbr'.*reno, cubic"),
          allowed_while_building("bbr", runner, fake)):
        pass
    assert runner.calls == [["modprobe", "tcp_bbr"]]


@pytest.mark.needs_root
def test_every_namespace_takes_the_testbeds_algorithm(tb_name):
    spec = load_testbed()
    allowed = (SYSCTL / "tcp_allowed_congestion_control").read_text().split()
    # one the host does not allow, where there is one (the widening is then exercised), else reno
    theirs = next((a for a in available() if a not in allowed), "reno")
    spec = spec.model_copy(update={"name": tb_name, "link": spec.link.model_copy(
        update={"tcp_congestion": theirs})})
    allowed_before = (SYSCTL / "tcp_allowed_congestion_control").read_text()
    with LocalTestbed(spec) as tb:
        got = {ns: subprocess.run(in_ns(ns, ["sysctl", "-n", "net.ipv4.tcp_congestion_control"]),
                                  capture_output=True, text=True, check=True).stdout.strip()
               for ns in tb.topology.namespaces}
    assert set(got.values()) == {theirs}, got
    assert (SYSCTL / "tcp_allowed_congestion_control").read_text() == allowed_before
