"""Per-slice and per-UE time series: the HTB counters of each slice and UE leaf, every second.

`watch_list(shapers)` names what to sample: each slice's class and each UE leaf, per direction.
`LocalTestbed.up` starts `python -m testbed.net.netstats OUT` in the UPF's namespace with that
list on its stdin; every interval it reads `tc -s class show` of both trees and appends one JSON
line per slice and UE leaf to OUT: wall time, direction, slice, UE group and address (UE leaves),
bytes and packets sent, drops and backlog (a slice's: the sum over the leaves under its class,
where HTB keeps them), and the rate since the sample before; and, for a gap between samples to
be told apart, how late the sample began (`late_ms`: the process waited for a core, or the sample
before ran long) and how long its `tc` took (`tc_ms`: `tc` waits for the kernel's netlink lock,
which another namespace's teardown can hold for seconds). After a late sample the next ones keep
their interval from it, not a burst to catch up. It ends when `tc` fails (the namespace is gone)
or on SIGTERM (`teardown` kills the namespace's processes), after its line.

With `--listen ADDR:PORT` it also serves the latest sample as Prometheus series on `/metrics`
(`exposition`): locally it runs in the data network's namespace (`--netns` names the UPF's,
where `tc` reads), so the cell's Prometheus there scrapes it on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from testbed.net.shaping import Shaper

_HEAD = re.compile(r"class htb (?P<id>\S+) (?:root|parent (?P<parent>\S+))")
_SENT = re.compile(r"Sent (?P<bytes>\d+) bytes (?P<pkts>\d+) pkt \(dropped (?P<drops>\d+)")
_BACKLOG = re.compile(r"backlog (?P<size>\d+(?:\.\d+)?)(?P<unit>[KMG]?)b (?P<pkts>\d+)p")
_UNIT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_classes(text: str) -> dict[str, dict[str, Any]]:
    """Per classid of `tc -s class show` text (HTB): parent, bytes, packets, drops, backlog."""
    out: dict[str, dict[str, Any]] = {}
    for block in re.split(r"\n(?=class )", text):
        head, sent, backlog = _HEAD.search(block), _SENT.search(block), _BACKLOG.search(block)
        if not (head and sent and backlog):
            continue
        out[head["id"]] = {
            "parent": head["parent"], "bytes": int(sent["bytes"]), "packets": int(sent["pkts"]),
            "drops": int(sent["drops"]),
            "backlog_bytes": round(float(backlog["size"]) * _UNIT[backlog["unit"]]),
            "backlog_packets": int(backlog["pkts"])}
    return out


def watch_list(shapers: Iterable[Shaper]) -> list[dict[str, Any]]:
    """What to sample in each tree: every slice's class (with slicing off, the shared one,
    slice "-") and every UE leaf."""
    out: list[dict[str, Any]] = []
    for s in shapers:
        for c in s.classes:
            out.append({"direction": s.direction, "device": s.device, "classid": c.classid,
                        "slice": c.slice, "group": None, "ue": None})
        for u in s.ue_classes:
            out.append({"direction": s.direction, "device": s.device, "classid": u.classid,
                        "slice": u.ue.slice, "group": u.ue.group, "ue": u.ue.address})
    return out


def rows(watch: list[dict[str, Any]], by_device: dict[str, dict[str, dict[str, Any]]], at: float,
         before: dict[tuple[str, str], tuple[float, int]],
         timing: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """One sample's lines: each watched class's counters (a class's drops and backlog summed
    over the leaves under it) and its rate since `before` (updated in place); `timing`
    (`late_ms`, `tc_ms`) is added to each."""
    out = []
    for w in watch:
        classes = by_device.get(w["device"], {})
        k = classes.get(w["classid"])
        if k is None:
            continue
        below = _subtree(classes, w["classid"])
        drops = sum(classes[c]["drops"] for c in below)
        backlog_b = sum(classes[c]["backlog_bytes"] for c in below)
        backlog_p = sum(classes[c]["backlog_packets"] for c in below)
        key = (w["device"], w["classid"])
        prev = before.get(key)
        rate = None if prev is None or at <= prev[0] else (k["bytes"] - prev[1]) * 8 / 1e6 / (at - prev[0])
        before[key] = (at, k["bytes"])
        out.append({"t": round(at, 3), "direction": w["direction"], "slice": w["slice"],
                    "group": w["group"], "ue": w["ue"], "bytes": k["bytes"],
                    "packets": k["packets"], "drops": drops, "backlog_bytes": backlog_b,
                    "backlog_packets": backlog_p,
                    "rate_mbit": None if rate is None else round(rate, 3), **(timing or {})})
    return out


def _subtree(classes: dict[str, dict[str, Any]], root: str) -> list[str]:
    children: dict[str, list[str]] = {}
    for cid, k in classes.items():
        if k["parent"]:
            children.setdefault(k["parent"], []).append(cid)
    out, todo = [], [root]
    while todo:
        cid = todo.pop()
        out.append(cid)
        todo += children.get(cid, [])
    return out


LISTEN = "127.0.0.1:9108"  # where a local testbed's sampler serves /metrics (in the DN namespace)
_SERIES = (  # (name, type, help, row field)
    ("testbed_htb_transmit_bytes_total", "counter", "Bytes the HTB class has sent.", "bytes"),
    ("testbed_htb_transmit_packets_total", "counter", "Packets the HTB class has sent.", "packets"),
    ("testbed_htb_drops_total", "counter", "Packets dropped in the leaves under the class.", "drops"),
    ("testbed_htb_backlog_bytes", "gauge", "Bytes queued in the leaves under the class.",
     "backlog_bytes"),
)


def exposition(sample: list[dict[str, Any]]) -> str:
    """Prometheus text of one sample's lines: per series, one line per slice class (labels slice,
    direction) and UE leaf (also group, ue)."""
    out = []
    for name, kind, text, field in _SERIES:
        out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        for r in sample:
            labels = {"slice": r["slice"], "direction": r["direction"]}
            if r["ue"] is not None:
                labels |= {"group": r["group"], "ue": r["ue"]}
            body = ",".join(f'{k}="{v}"' for k, v in labels.items())
            out.append(f"{name}{{{body}}} {r[field]}")
    return "\n".join(out) + "\n"


def _serve(listen: str, latest: list[str]) -> ThreadingHTTPServer:
    host, port = listen.rsplit(":", 1)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = latest[0].encode()
            self.send_response(200 if self.path.startswith("/metrics") else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            try:
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the scraper gave up: its timeout is its interval, 62 ms at time scale 16

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer((host, int(port)), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    """Sample the watch list on stdin every interval into OUT until the namespace is gone."""
    parser = argparse.ArgumentParser(prog="python -m testbed.net.netstats", description=__doc__)
    parser.add_argument("out", type=Path, help="JSON lines, one per slice or UE leaf per sample")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--netns", help="the namespace whose trees `tc -n` reads (default: this)")
    parser.add_argument("--listen", help="ADDR:PORT to serve the latest sample on /metrics")
    args = parser.parse_args(argv)
    latest = [""]
    if args.listen:
        _serve(args.listen, latest)
    tc = ["tc", "-n", args.netns] if args.netns else ["tc"]
    watch = json.loads(sys.stdin.read())
    devices = sorted({w["device"] for w in watch})
    stop = writing = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True
        if not writing:  # asleep or reading: leave now; writing: after the line
            raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    before: dict[tuple[str, str], tuple[float, int]] = {}
    next_at = time.time()
    with args.out.open("a") as out:
        while not stop:
            began = time.time()
            by_device = {}
            for dev in devices:
                done = subprocess.run([*tc, "-s", "class", "show", "dev", dev],
                                      capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    return 0  # the namespace is gone
                by_device[dev] = parse_classes(done.stdout)
            timing = {"late_ms": round(max(0.0, began - next_at) * 1000.0, 1),
                      "tc_ms": round((time.time() - began) * 1000.0, 1)}
            sample = rows(watch, by_device, time.time(), before, timing)
            latest[0] = exposition(sample)
            lines = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in sample)
            writing = True
            out.write(lines)
            out.flush()
            writing = False
            next_at = max(next_at + args.interval, time.time())  # late: on from now
            time.sleep(max(0.0, next_at - time.time()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
