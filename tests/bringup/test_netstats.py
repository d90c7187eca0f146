"""Per-slice and per-UE HTB time series sampled from a real testbed every second (root only)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.bringup.local import LocalTestbed
from testbed.config import load_testbed
from testbed.net.cmd import in_ns
from testbed.net.iperf import IperfSession
from testbed.net.netstats import rows
from testbed.pytest_plugin import MachineBehind
from tests.conftest import namespaces_with_prefix


@pytest.mark.needs_root
@pytest.mark.timed  # samples every second, rates over seconds
def test_each_slice_and_ambr_leaf_is_sampled_every_second_in_both_directions(tb_name,
                                                                             tmp_path: Path):
    spec = load_testbed()
    lim = spec.ue_groups[0].model_copy(update={"count": 1, "ambr_uplink_mbit": 5.0})
    spec = spec.model_copy(update={"name": tb_name, "ue_groups": [lim, spec.ue_groups[1]]})
    out = tmp_path / "net.jsonl"
    with LocalTestbed(spec, netstats_log=out) as tb:
        IperfSession.start(tb.topology, "ai", flows=2, duration=4.5).wait()
        time.sleep(1.2)
        # the same counters as Prometheus series, where the cell's Prometheus scrapes them
        scraped = subprocess.run(in_ns(tb.topology.dn.name, [
            sys.executable, "-c", "import urllib.request as u; print(u.urlopen("
            f"'http://{tb.netstats_target}/metrics').read().decode())"]),
            capture_output=True, text=True, check=True).stdout
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    up_ai = re.search(r'^testbed_htb_transmit_bytes_total\{slice="ai",direction="uplink"\} (\d+)$',
                      scraped, re.M)
    assert up_ai and int(up_ai[1]) > 1_000_000, scraped[:500]
    assert ('testbed_htb_drops_total{slice="ai",direction="uplink",group="ai",ue="10.45.0.2"}'
            in scraped)
    assert namespaces_with_prefix(f"tb-{tb_name}-") == []
    keys = {(r["direction"], r["slice"], r["ue"]) for r in lines}
    assert keys == {("uplink", "ai", None), ("uplink", "be", None), ("uplink", "-", None),
                    ("downlink", "ai", None), ("downlink", "be", None), ("downlink", "-", None),
                    ("uplink", "ai", "10.45.0.2")}  # the one AMBR leaf: uplink only
    ue = [r for r in lines if r["ue"] is not None]
    assert all(r["group"] == "ai" for r in ue)
    gaps = [b["t"] - a["t"] for a, b in itertools.pairwise(ue)]
    stalled = [(g, b) for g, (_, b) in zip(gaps, itertools.pairwise(ue), strict=True) if g > 1.5]
    # a sample whose `tc` waited for the kernel's netlink lock (another test's namespaces torn
    # down beside this one: a first gap of 22.5 s in a busy-suite run), or that began late for a
    # core, is the machine's; one late for neither is the sampler's
    waited = [(g, b) for g, b in stalled if b["tc_ms"] + b["late_ms"] >= 1000 * (g - 1.5)]
    if stalled and len(waited) == len(stalled):
        raise MachineBehind("the sampler's gaps " + ", ".join(
            f"{g:.1f} s (its tc took {b['tc_ms']:.0f} ms, it began {b['late_ms']:.0f} ms late)"
            for g, b in waited), {})
    assert len(ue) >= 4 and all(0.8 <= g <= 1.5 for g in gaps), gaps
    # the seconds inside the flow at its AMBR (its first and last second only partly)
    busy = sorted(r["rate_mbit"] for r in ue if r["rate_mbit"] is not None and r["rate_mbit"] > 1)
    assert len(busy) >= 3 and busy[-2] >= 4.0 and busy[-1] <= 5.6, busy
    ai = [r for r in lines if (r["direction"], r["slice"], r["ue"]) == ("uplink", "ai", None)]
    assert ai[-1]["bytes"] >= ue[-1]["bytes"] > 1_000_000  # the slice counts its UE's leaf
    assert max(r["backlog_packets"] for r in ai) > 0  # a 5 Mbit/s leaf behind two bulk flows


def test_a_slice_sums_the_drops_and_backlog_of_the_leaves_under_it():
    classes = {"1:100": {"parent": "1:1", "bytes": 900, "packets": 9, "drops": 0,
                         "backlog_bytes": 0, "backlog_packets": 0},
               "1:4000": {"parent": "1:100", "bytes": 500, "packets": 5, "drops": 3,
                          "backlog_bytes": 3000, "backlog_packets": 2},
               "1:200": {"parent": "1:100", "bytes": 400, "packets": 4, "drops": 1,
                         "backlog_bytes": 1500, "backlog_packets": 1},
               "1:101": {"parent": "1:1", "bytes": 7, "packets": 1, "drops": 5,
                         "backlog_bytes": 0, "backlog_packets": 0}}
    watch = [{"direction": "uplink", "device": "n6", "classid": "1:100", "slice": "ai",
              "group": None, "ue": None}]
    before = {("n6", "1:100"): (9.0, 900 - 125_000)}
    [r] = rows(watch, {"n6": classes}, 10.0, before)
    assert (r["drops"], r["backlog_bytes"], r["backlog_packets"]) == (4, 4500, 3)
    assert r["rate_mbit"] == 1.0 and before[("n6", "1:100")] == (10.0, 900)
