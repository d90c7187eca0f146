"""Conditions traces replayed on a real testbed: a capacity step shows in a bulk flow within 1 s
(root only)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from testbed.bringup.local import LocalTestbed, class_counters
from testbed.config import load_testbed
from testbed.config.conditions import ConditionsSpec, ConditionStep
from testbed.net.iperf import IperfSession
from testbed.net.state import load_state
from tests.conftest import namespaces_with_prefix

pytestmark = [pytest.mark.needs_root, pytest.mark.timed]  # measures rates over seconds


def _with_trace(name: str, steps: list[tuple[float, float]], **target):
    spec = load_testbed()
    trace = ConditionsSpec(trace="inline", steps=[ConditionStep(time_s=t, capacity_mbit=c)
                                                  for t, c in steps], **target)
    return spec.model_copy(update={"name": name, "link": spec.link.model_copy(
        update={"conditions": [trace]})})


def _ai_uplink_bytes(name: str) -> tuple[float, int]:
    """(when, bytes): stamped halfway through the read, which on a busy machine takes a tenth of
    a second or more (a `tc` process), a quarter of the 0.4 s window a rate is taken over."""
    before = time.time()
    [c] = [c for c in class_counters(load_state(name)) if (c.direction, c.slice) == ("uplink", "ai")]
    return (before + time.time()) / 2, c.bytes


def test_a_step_from_50_to_10_mbit_shows_in_a_bulk_flow_within_a_second(tb_name, tmp_path: Path):
    log = tmp_path / "conditions.jsonl"
    spec = _with_trace(tb_name, [(0, 50), (3, 10)], slice="ai")
    with LocalTestbed(spec, conditions_log=log) as tb:
        flow = IperfSession.start(tb.topology, "ai", flows=2, duration=6)
        samples = []
        end = time.time() + 6
        while time.time() < end:
            samples.append(_ai_uplink_bytes(tb_name))
            time.sleep(0.05)
        flow.wait()
    [step] = [json.loads(line) for line in log.read_text().splitlines()]
    assert step["ok"] and step["values"]["slice ai"]["capacity_mbit"] == 10

    def rate(t0: float, t1: float) -> float:  # Mbit/s between the samples nearest t0 and t1
        a = min(samples, key=lambda s: abs(s[0] - t0))
        b = min(samples, key=lambda s: abs(s[0] - t1))
        return (b[1] - a[1]) * 8 / 1e6 / (b[0] - a[0])

    at = step["t"]
    assert rate(at - 1.2, at - 0.2) >= 40, "before the step the flow fills the 50 Mbit/s ceiling"
    assert rate(at + 0.6, at + 1.0) <= 12, "within a second of the step it runs at 10"
    assert rate(at + 1.0, at + 2.5) <= 11
    assert namespaces_with_prefix(f"tb-{tb_name}-") == []


_SEND = ("import socket, sys\n"
         "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
         "s.bind((sys.argv[1], 0))\n"
         "for _ in range(int(sys.argv[3])):\n"
         "    s.sendto(bytes(100), (sys.argv[2], 9))\n")


def _lost_after_sending(tb: LocalTestbed, slice_: str, count: int) -> int:
    """Datagrams from a UE of `slice_`; the loss class's drops so far."""
    import subprocess
    import sys

    from testbed.net.cmd import in_ns

    ue = tb.topology.ues_of_slice(slice_)[0]
    subprocess.run(in_ns(ue.host.name, [sys.executable, "-c", _SEND, str(ue.address),
                                        str(tb.topology.dn_addr), str(count)]), check=True)
    time.sleep(0.2)
    raw = subprocess.run(["tc", "-n", tb.topology.upf.name, "-s", "-j", "qdisc", "show", "dev",
                          tb.shapers[0].device], capture_output=True, text=True, check=True).stdout
    [lost] = [q for q in json.loads(raw) if q["handle"] == "fe:"]
    return lost["drops"]


@pytest.mark.parametrize("target", [{"ue_group": "ai"}, {"slice": "ai"}])
def test_a_trace_loses_its_share_of_its_targets_uplink_packets_only(tb_name, tmp_path: Path,
                                                                    target):
    """Loss 0.3 for the ai group (or slice) from time 0: of 500 datagrams from an ai UE about 150
    are lost (90-210 is more than 4 standard deviations either way); of the be UE's none."""
    spec = load_testbed()
    trace = ConditionsSpec(trace="inline", steps=[ConditionStep(time_s=0, loss=0.3)], **target)
    spec = spec.model_copy(update={"name": tb_name, "link": spec.link.model_copy(
        update={"conditions": [trace]})})
    with LocalTestbed(spec, conditions_log=tmp_path / "log") as tb:
        ai = _lost_after_sending(tb, "ai", 500)
        be = _lost_after_sending(tb, "be", 500) - ai
    assert 90 <= ai <= 210, ai
    assert be == 0


def test_a_delay_trace_is_refused_in_one_line_without_netem_and_applied_with_it(tb_name,
                                                                               tmp_path: Path):
    from testbed.errors import MissingRequirement

    spec = load_testbed()
    trace = ConditionsSpec(trace="inline", steps=[ConditionStep(time_s=0, delay_ms=5),
                                                  ConditionStep(time_s=60, delay_ms=50)])
    spec = spec.model_copy(update={"name": tb_name, "link": spec.link.model_copy(
        update={"conditions": [trace]})})
    tb = LocalTestbed(spec, conditions_log=tmp_path / "log")
    try:
        tb.up()
    except MissingRequirement as exc:
        assert "netem" in str(exc) and "\n" not in str(exc)
    else:
        try:
            rtt = IperfSession.start(tb.topology, "ai", duration=1).wait().mean_rtt_ms
        finally:
            tb.down()
        assert rtt is not None and rtt >= 10  # 5 ms each way
    assert namespaces_with_prefix(f"tb-{tb_name}-") == []
