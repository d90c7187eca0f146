"""`testbed up` time and one bulk flow's throughput at 10, 100 and 1,000 UEs, each with an AMBR
(so each has its own HTB leaf in both directions, found through the u32 hash on its address's
last octet). The link is 10 Gbit/s and each AMBR 5 Gbit/s, so the flow is bounded by what the
kernel's classifier and the CPU cost, not by the shaping: with hashed filters it stays flat from
10 to 1,000 UEs. The flow runs from the last UE, whose bucket is the fullest (4 keys at 1,000).
Beside each, the same testbed without UE leaves (AMBRs at the link's capacity): what the leaves
and the hash cost, apart from the machine's noise; with --linear also the leaves found by one
u32 key per UE in a row instead of the hash (what the hash saves: the flow's UE is the last key).
Root only.
Run from the repository root: PYTHONPATH=. python3 bench/ue_scale.py [UES ...] [--seconds S]"""

from __future__ import annotations

import argparse
import ipaddress
import secrets
import statistics
import time

from rich.progress import Progress

from testbed.bringup.local import LocalTestbed
from testbed.config import load_testbed
from testbed.net.iperf import IperfSession
from testbed.net.shaping import tc_batch


def spec_with(ues: int, ambr_mbit: float = 5000.0):
    """The default testbed, its ai slice a /22 holding `ues` UEs with these AMBRs, 10 Gbit/s."""
    spec = load_testbed()
    ai = spec.slices[0].model_copy(update={"subnet": ipaddress.ip_network("10.44.0.0/22")})
    group = spec.ue_groups[0].model_copy(update={"count": ues, "ambr_uplink_mbit": ambr_mbit,
                                                 "ambr_downlink_mbit": ambr_mbit})
    return spec.model_copy(update={
        "name": "b" + secrets.token_hex(3), "slices": [ai, spec.slices[1]],
        "link": spec.link.model_copy(update={"capacity_mbit": 10_000.0}),
        "ue_groups": [group, spec.ue_groups[1].model_copy(update={"count": 1, "ambr_uplink_mbit": 10_000.0,
                                                               "ambr_downlink_mbit": 10_000.0})]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ues", nargs="*", type=int, default=[10, 100, 1000])
    parser.add_argument("--seconds", type=float, default=5.0, help="each flow's length")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds over all configurations (interleaved, so that a busy spell "
                             "of the machine hits each alike); the median and range are printed")
    parser.add_argument("--linear", action="store_true",
                        help="also the leaves without the hash: one u32 key per UE, in a row")
    args = parser.parse_args()
    runs: dict[tuple[int, str], list[tuple[int, float, float, float]]] = {}
    kinds = ["hashed", "no leaves", *(["linear"] if args.linear else [])]
    configs = [(n, kind) for n in args.ues for kind in kinds]
    with Progress() as progress:
        task = progress.add_task("testbeds", total=args.repeat * len(configs))
        for n, kind in (c for _ in range(args.repeat) for c in configs):
            tb = LocalTestbed(spec_with(n, 10_000.0 if kind == "no leaves" else 5000.0))
            t0 = time.perf_counter()
            tb.up()
            up_s = time.perf_counter() - t0
            try:
                if kind == "linear":
                    _unhash(tb)
                leaves = len(tb.shapers[0].ue_classes)
                last = n - 1  # the UE last in the fullest bucket
                rates = []
                for reverse in (False, True):
                    r = IperfSession.start(tb.topology, "ai", ue_index=last, flows=1, omit=1,
                                           duration=args.seconds, reverse=reverse).wait()
                    rates.append(r.total_mbit)
            finally:
                tb.down()
            runs.setdefault((n, kind), []).append((leaves, up_s, *rates))
            progress.advance(task)
    print(f"{'UEs':>5} {'filters':>9} {'UE leaves/dir':>13} {'up (s)':>16} {'uplink Mbit/s':>16} "
          f"{'downlink Mbit/s':>16}   (median, and min-max over {args.repeat} rounds)")
    for (n, kind), got in runs.items():
        cols = [_spread([g[k] for g in got], digits) for k, digits in ((1, 2), (2, 0), (3, 0))]
        print(f"{n:>5} {kind:>9} {got[0][0]:>13} {cols[0]:>16} {cols[1]:>16} {cols[2]:>16}")


def _unhash(tb: LocalTestbed) -> None:
    """Replace each tree's UE hash table with one u32 key per UE leaf, in the leaves' order."""
    ns = tb.topology.upf.name
    for shaper in tb.shapers:
        dev, key = shaper.device, "src" if shaper.direction == "uplink" else "dst"
        cmds = [["tc", "filter", "del", "dev", dev, "parent", "1:", "prio", "1"]]
        cmds += [["tc", "filter", "add", "dev", dev, "parent", "1:", "prio", "1", "protocol",
                  "ip", "u32", "match", "ip", key, f"{u.ue.address}/32", "flowid", u.classid]
                 for u in shaper.ue_classes]
        tb.runner.run(["tc", "-n", ns, "-batch", "-"], input=tc_batch(cmds))


def _spread(values: list[float], digits: int) -> str:
    """The median, and the range where there are several."""
    mid = statistics.median(values)
    if len(values) == 1:
        return f"{mid:.{digits}f}"
    return f"{mid:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


if __name__ == "__main__":
    main()
