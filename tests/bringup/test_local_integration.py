"""Brings real testbeds up and down in network namespaces (root only)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from testbed.bringup.local import LocalTestbed, class_counters, teardown
from testbed.config import load_testbed
from testbed.errors import StateError
from testbed.net.cmd import Runner, in_ns
from testbed.net.iperf import IperfSession
from testbed.net.state import load_state, recorded_names
from testbed.pytest_plugin import MachineBehind
from tests.conftest import namespaces_with_prefix

pytestmark = pytest.mark.needs_root


def _spec(name: str, **link):
    spec = load_testbed()
    return spec.model_copy(update={"name": name,
                                   "link": spec.link.model_copy(update=link)})


def _assert_nothing_left(name: str, pids: list[int] = ()) -> None:
    assert namespaces_with_prefix(f"tb-{name}-") == []
    assert name not in recorded_names()
    root_links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert f"tb-{name}" not in root_links
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or _zombie(pid), f"process {pid} survived"


def _zombie(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_up_traffic_counters_down(tb_name):
    tb = LocalTestbed(_spec(tb_name))
    tb.up()
    try:
        assert sorted(namespaces_with_prefix(f"tb-{tb_name}-")) == sorted(tb.topology.namespaces)
        ue = tb.topology.ues_of_slice("ai")[0]
        addrs = Runner().run(["ip", "-n", ue.host.name, "-br", "addr"]).stdout
        assert str(ue.address) in addrs
        result = IperfSession.start(tb.topology, "ai", flows=2, duration=1).wait()
        assert result.total_mbit > 1 and len(result.flows) == 2
        counters = {(c.direction, c.slice): c for c in class_counters(load_state(tb_name))}
        assert counters[("uplink", "ai")].bytes > 100_000  # the data went through the ai class
        assert counters[("uplink", "be")].bytes < 10_000
        assert counters[("downlink", "ai")].packets > 0  # ACKs, classified by destination
        server = subprocess.Popen(in_ns(tb.topology.dn.name, ["iperf3", "-s", "-p", "5999"]),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.2)
    finally:
        tb.down()
    server.wait(timeout=5)  # down killed the server running in the DN namespace
    _assert_nothing_left(tb_name, [server.pid])


def _uplink_bytes(tb_name: str) -> tuple[float, int]:
    """When, and how many bytes the uplink's slice classes have sent so far."""
    at = time.monotonic()
    return at, sum(c.bytes for c in class_counters(load_state(tb_name)) if c.direction == "uplink")


@pytest.mark.timed  # a rate over seconds
def test_slice_guarantee_holds_against_many_flows(tb_name):
    """The ai slice keeps its 20 Mbit/s against 10 best-effort flows, and the two together stay
    within the 100 Mbit/s link, read from the kernel's class counters while both run (the two
    iperf3 clients' own averages cover windows that a busy machine may start apart)."""
    with LocalTestbed(_spec(tb_name)) as tb:
        ai = IperfSession.start(tb.topology, "ai", flows=1, duration=4, omit=1)
        be = IperfSession.start(tb.topology, "be", flows=10, duration=4, omit=1)
        time.sleep(1.5)
        t0, sent0 = _uplink_bytes(tb_name)
        time.sleep(1.5)
        t1, sent1 = _uplink_bytes(tb_name)
        r_ai, r_be = ai.wait(), be.wait()
    assert r_ai.total_mbit >= 19.0, r_ai.total_mbit
    assert r_be.total_mbit > 0
    assert (sent1 - sent0) * 8 / 1e6 / (t1 - t0) <= 102
    _assert_nothing_left(tb_name)


_BURST = ("import socket, sys, time\n"
          "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
          "s.bind((sys.argv[1], int(sys.argv[4])))\n"
          "t = time.perf_counter()\n"
          "for _ in range(int(sys.argv[5])):\n"
          "    s.sendto(bytes(int(sys.argv[3])), (sys.argv[2], 9))\n"
          "print(time.perf_counter() - t)\n")


def _burst_into_flow_queues(tb: LocalTestbed, payload: int, kind: str, *, slice_: str = "ai",
                            port: int = 0, count: int = 60, within_s: float | None = None
                            ) -> list[dict]:
    """`count` datagrams of `payload` bytes from a UE of `slice_` (from `port`; 0: any) in one
    go; the uplink flow-queue leaves of qdisc `kind` with their counters afterwards. A burst
    that took longer than `within_s` to send (its sender waited for a core) is the machine's."""
    ue = tb.topology.ues_of_slice(slice_)[0]
    took = float(Runner().run(in_ns(ue.host.name, [
        sys.executable, "-c", _BURST, str(ue.address), str(tb.topology.dn_addr), str(payload),
        str(port), str(count)])).stdout)
    if within_s is not None and took > within_s:
        raise MachineBehind(f"the burst of {count} datagrams took {1000 * took:.1f} ms to send, "
                            f"over {1000 * within_s:.1f} ms: the bottleneck drained it meanwhile",
                            {})
    time.sleep(0.2)
    raw = Runner().run(["tc", "-n", tb.topology.upf.name, "-s", "-j", "qdisc", "show",
                        "dev", tb.shapers[0].device]).stdout
    return [q for q in json.loads(raw) if q["kind"] == kind]


@pytest.mark.parametrize("sets, shared", [("per-slice", False), ("per-class", True)])
def test_flow_queue_sets_keep_two_slices_flows_apart_in_one_class(tb_name, sets, shared):
    """Slicing off, an ai UE's flow and a be UE's flow from the same port hash to the same bucket:
    per slice they still land in two flow queues (a connection never queues behind another
    slice's bulk flow), per class in one."""
    spec = _spec(tb_name, flow_queues=4, flow_queue_sets=sets, slicing=False)
    with LocalTestbed(spec) as tb:
        _burst_into_flow_queues(tb, 100, "pfifo", slice_="ai", port=40002, count=5)
        leaves = _burst_into_flow_queues(tb, 100, "pfifo", slice_="be", port=40002, count=5)
    used = [q["packets"] for q in leaves if q["packets"]]
    assert len(leaves) == (4 if shared else 12)
    assert used == ([10] if shared else [5, 5]), used
    _assert_nothing_left(tb_name)


@pytest.mark.parametrize("depth, drop, dropped", [(8, "tail", True), (8, "head", True),
                                                  (100, "tail", False)])
def test_flow_queue_packets_drops_a_burst_over_it(tb_name, depth, drop, dropped):
    """docs/slicing.md: a burst deeper than a flow queue loses packets at the bottleneck (the
    image upload's loss: its tail, or with flow_queue_drop head its oldest packets); one that
    fits is only delayed. 60 datagrams of one flow reach the 10 Mbit/s uplink in well under a
    millisecond, which passes about one of them."""
    spec = _spec(tb_name, capacity_mbit=10, flow_queues=4, flow_queue_packets=depth,
                 flow_queue_drop=drop, slicing=False)
    kind = {"tail": "pfifo", "head": "pfifo_head_drop"}[drop]
    with LocalTestbed(spec) as tb:
        # sent within the time the 10 Mbit/s uplink passes 10 of them (0.96 ms each), the
        # tolerance below; a sender held up longer lets the bottleneck drain the burst
        leaves = _burst_into_flow_queues(tb, 1200, kind, within_s=0.0096)
    assert len(leaves) == 4 and all(q["options"]["limit"] == depth for q in leaves)
    drops = sum(q["drops"] for q in leaves)
    if dropped:
        assert 60 - depth - 10 <= drops <= 60 - depth, drops
    else:
        assert drops == 0 and sum(q["packets"] for q in leaves) >= 60
    _assert_nothing_left(tb_name)


@pytest.mark.parametrize("payload, dropped", [(1200, True), (20, False)])
def test_flow_queue_bytes_drops_full_size_packets_and_keeps_small_ones(tb_name, payload, dropped):
    """A byte limit holds a burst of small packets (an ACK stream's) that a packet limit of the
    same full-size depth would not: 60 datagrams into 10,000-byte flow queues at 10 Mbit/s."""
    spec = _spec(tb_name, capacity_mbit=10, flow_queues=4, flow_queue_bytes=10_000, slicing=False)
    with LocalTestbed(spec) as tb:
        leaves = _burst_into_flow_queues(tb, payload, "bfifo")
    assert len(leaves) == 4 and all(q["options"]["limit"] == 10_000 for q in leaves)
    drops = sum(q["drops"] for q in leaves)
    if dropped:  # 1,242-byte frames: 8 fit
        assert 60 - 8 - 10 <= drops <= 60 - 8, drops
    else:  # 62-byte frames: all 60 fit in 3,720 bytes
        assert drops == 0 and sum(q["packets"] for q in leaves) >= 60
    _assert_nothing_left(tb_name)


def test_up_twice_is_an_error_and_keeps_the_first(tb_name):
    with LocalTestbed(_spec(tb_name)) as tb:
        with pytest.raises(StateError, match="already up"):
            LocalTestbed(_spec(tb_name)).up()
        assert sorted(namespaces_with_prefix(f"tb-{tb_name}-")) == sorted(tb.topology.namespaces)
        assert load_state(tb_name).status == "up"
    _assert_nothing_left(tb_name)


class InterruptingRunner(Runner):
    """Runs real commands, then raises KeyboardInterrupt as if Ctrl-C came after `after` of them."""

    def __init__(self, after: int):
        self.after = after
        self.count = 0

    def run(self, argv, **kw):
        self.count += 1
        if self.count == self.after:
            raise KeyboardInterrupt
        return super().run(argv, **kw)


@pytest.mark.parametrize("after", [3, 12, 30])
def test_interrupt_during_up_removes_everything(tb_name, after):
    with pytest.raises(KeyboardInterrupt):
        LocalTestbed(_spec(tb_name), runner=InterruptingRunner(after)).up()
    _assert_nothing_left(tb_name)


def test_down_recovers_after_sigkill(tb_name, state_dir):
    script = textwrap.dedent(f"""
        import subprocess, time
        from testbed.config import load_testbed
        from testbed.net.cmd import in_ns
        from testbed.bringup.local import LocalTestbed
        spec = load_testbed().model_copy(update={{"name": "{tb_name}"}})
        tb = LocalTestbed(spec); tb.up()
        subprocess.Popen(in_ns(tb.topology.dn.name, ["iperf3", "-s", "-p", "5998"]))
        print("ready", flush=True)
        time.sleep(60)
    """)
    env = dict(os.environ, TESTBED_STATE_DIR=str(state_dir))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=os.getcwd())
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ns = f"tb-{tb_name}-dn"
    orphans = [int(p) for p in Runner().run(["ip", "netns", "pids", ns]).stdout.split()]
    assert orphans, "the iperf3 server should have outlived its parent"
    removed = teardown(tb_name)
    assert ns in removed
    _assert_nothing_left(tb_name, orphans)


def test_two_testbeds_coexist(tb_name):
    other = tb_name[:-1] + ("x" if tb_name[-1] != "x" else "y")
    with LocalTestbed(_spec(tb_name)) as a, LocalTestbed(_spec(other)) as b:
        assert set(a.topology.namespaces).isdisjoint(b.topology.namespaces)
        ra = IperfSession.start(a.topology, "be", duration=1).wait()
        rb = IperfSession.start(b.topology, "be", duration=1).wait()
        assert ra.total_mbit > 1 and rb.total_mbit > 1
    _assert_nothing_left(tb_name)
    _assert_nothing_left(other)


def test_leftover_namespaces_without_state_block_up_until_down(tb_name):
    Runner().run(["ip", "netns", "add", f"tb-{tb_name}-upf"])
    try:
        with pytest.raises(StateError, match="still here"):
            LocalTestbed(_spec(tb_name)).up()
        assert namespaces_with_prefix(f"tb-{tb_name}-") == [f"tb-{tb_name}-upf"]
    finally:
        teardown(tb_name)
    _assert_nothing_left(tb_name)


def test_missing_netem_is_reported_or_delay_is_applied(tb_name):
    tb = LocalTestbed(_spec(tb_name, delay_ms=5))
    try:
        tb.up()
    except Exception as exc:
        assert "netem" in str(exc)
    else:
        rtt = IperfSession.start(tb.topology, "ai", duration=1).wait().mean_rtt_ms
        tb.down()
        assert rtt is not None and rtt >= 10  # 5 ms each way
    _assert_nothing_left(tb_name)


def test_uplink_loss_drops_its_share_of_a_ues_packets_and_spares_the_downlink(tb_name):
    """link.uplink_loss 0.2 on the data plane: of 500 datagrams from a UE about 100 are lost (a
    binomial draw: 60-140 is more than 4 standard deviations either way)."""
    with LocalTestbed(_spec(tb_name, uplink_loss=0.2)) as tb:
        ue = tb.topology.ues_of_slice("ai")[0]
        Runner().run(in_ns(ue.host.name, [sys.executable, "-c", _BURST, str(ue.address),
                                          str(tb.topology.dn_addr), "100", "0", "500"]))
        time.sleep(0.2)
        raw = Runner().run(["tc", "-n", tb.topology.upf.name, "-s", "-j", "qdisc", "show",
                            "dev", tb.shapers[0].device]).stdout
        [lost] = [q for q in json.loads(raw) if q["handle"] == "fe:"]
        downlink = Runner().run(["tc", "-n", tb.topology.upf.name, "-j", "qdisc", "show",
                                 "dev", tb.shapers[1].device]).stdout
    assert 60 <= lost["drops"] <= 140, lost
    assert not any(q["handle"] == "fe:" for q in json.loads(downlink))
    _assert_nothing_left(tb_name)


def _leaf_counts(tb: LocalTestbed, shaper: int) -> dict[int, int]:
    raw = Runner().run(["tc", "-n", tb.topology.upf.name, "-s", "-j", "qdisc", "show",
                        "dev", tb.shapers[shaper].device]).stdout
    return {int(q["handle"].rstrip(":"), 16): q["packets"] for q in json.loads(raw)
            if q["kind"] == "pfifo" and q["handle"] not in ("1:", "ff:")}


_LEAF_BURST = 20  # datagrams per probe: a stray ARP or ICMP packet never reaches as many


def _leaf_of(tb: LocalTestbed, shaper: int, send) -> int:
    """The one flow-queue leaf whose packet count grows by the _LEAF_BURST datagrams `send()`
    sends (other leaves may see a stray packet of the namespace's own)."""
    before = _leaf_counts(tb, shaper)
    send()
    time.sleep(0.2)
    grown = [h for h, n in _leaf_counts(tb, shaper).items() if n - before.get(h, 0) >= _LEAF_BURST]
    assert len(grown) == 1, grown
    return grown[0]


@pytest.mark.parametrize("sets", ["per-class", "per-slice"])
def test_perturbed_flow_queue_hash_is_flow_bucket_and_moves_when_redrawn(tb_name, sets):
    """link.flow_queue_perturb_s: the classic-BPF classifier puts a UE's port (source uplink,
    destination downlink) in leaf flow_bucket(port, n, salt) of its set (each slice's own set
    with per-slice), starting at salt 0; `salted_filters` re-draws it, and the perturber that
    does so every few seconds is recorded and gone after down."""
    from testbed.net.perturb import salted_batch
    from testbed.net.shaping import flow_bucket

    spec = _spec(tb_name, flow_queues=256, flow_queue_sets=sets, flow_queue_perturb_s=3600,
                 slicing=False)
    salt = 0x5EED1234
    ports = [40002, 40004, 51234]
    with LocalTestbed(spec) as tb:
        [perturber] = load_state(tb_name).processes
        assert perturber.name == "flow-queue-perturb" and not _zombie(perturber.pid)
        first = 0x1000 + (0x100 if sets == "per-slice" else 0)  # be is the second slice's set
        ue = tb.topology.ues_of_slice("be")[0]

        def up(port):
            return lambda: Runner().run(in_ns(ue.host.name, [
                sys.executable, "-c", _BURST, str(ue.address), str(tb.topology.dn_addr),
                "100", str(port), str(_LEAF_BURST)]))

        def down(port):  # from the data network to the UE's port
            return lambda: Runner().run(in_ns(tb.topology.dn.name, [
                sys.executable, "-c", _BURST_TO, str(ue.address), str(port), str(_LEAF_BURST)]))

        for s in (0, salt):
            if s:
                Runner().run(["tc", "-n", tb.topology.upf.name, "-batch", "-"],
                             input=salted_batch(tb.shapers, s))
            assert [_leaf_of(tb, 0, up(p)) for p in ports] == \
                [first + flow_bucket(p, 256, s) for p in ports]
            assert [_leaf_of(tb, 1, down(p)) for p in ports] == \
                [first + flow_bucket(p, 256, s) for p in ports]
        assert len({flow_bucket(p, 256, 0) for p in ports} | {flow_bucket(p, 256, salt) for p in ports}) > 3
    _assert_nothing_left(tb_name, [perturber.pid])


_BURST_TO = ("import socket, sys\n"
             "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
             "for _ in range(int(sys.argv[3])):\n"
             "    s.sendto(bytes(100), (sys.argv[1], int(sys.argv[2])))\n")
