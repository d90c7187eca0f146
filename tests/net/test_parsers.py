from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.bringup.local import parse_htb_classes
from testbed.net.iperf import IperfFailed, parse_iperf_json

FIXTURES = Path(__file__).parent / "fixtures"

TC_TEXT = """\
class htb 1:101 parent 1:1 leaf 11: prio 0 rate 8Kbit ceil 100Mbit burst 1600b cburst 1600b
 Sent 11435294 bytes 9062 pkt (dropped 3, overlimits 603 requeues 0)
 backlog 1514b 1p requeues 0
 lended: 0 borrowed: 0 giants: 0
 tokens: 25000000 ctokens: 2000

class htb 1:1 root rate 100Mbit ceil 100Mbit burst 1600b cburst 1600b
 Sent 538 bytes 7 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
"""


def test_parse_htb_class_counters():
    got = parse_htb_classes(TC_TEXT)
    assert got["1:101"] == {"bytes": 11435294, "packets": 9062, "drops": 3, "overlimits": 603,
                            "qlen": 1}
    assert got["1:1"]["bytes"] == 538


def test_parse_real_iperf3_json_uplink():
    raw = json.loads((FIXTURES / "iperf3-uplink-2flows.json").read_text())
    r = parse_iperf_json(raw, slice_name="be", ue="10.46.0.2", reverse=False)
    assert r.direction == "uplink" and len(r.flows) == 2
    assert r.total_mbit == pytest.approx(raw["end"]["sum_received"]["bits_per_second"] / 1e6)
    assert sum(f.goodput_mbit for f in r.flows) == pytest.approx(r.total_mbit, rel=0.02)
    assert r.mean_rtt_ms is not None and r.mean_rtt_ms > 0
    assert r.retransmits == raw["end"]["sum_sent"]["retransmits"]


def test_reverse_mode_takes_rtt_from_the_server_report():
    raw = json.loads((FIXTURES / "iperf3-uplink-2flows.json").read_text())
    r = parse_iperf_json(raw, slice_name="be", ue="10.46.0.2", reverse=True)
    assert r.direction == "downlink" and r.mean_rtt_ms is None and r.retransmits is None
    raw["server_output_json"] = {"end": {"streams": raw["end"]["streams"],
                                         "sum_sent": {"retransmits": 7}}}
    r = parse_iperf_json(raw, slice_name="be", ue="10.46.0.2", reverse=True)
    assert r.retransmits == 7 and r.mean_rtt_ms is not None and r.mean_rtt_ms > 0


def test_iperf_error_is_raised():
    with pytest.raises(IperfFailed, match="unable to connect"):
        parse_iperf_json({"error": "unable to connect to server"}, slice_name="x", ue="y",
                         reverse=False)
