"""The network over time: each slice's throughput per direction beside the services' latency."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from testbed.clock import ScenarioClock
from testbed.report.plots import _save, latency_buckets
from testbed.scenario.rundir import read_jsonl


def slice_series(cell_dir: Path) -> dict[tuple[str, str], dict[str, list[float]]]:
    """Per (slice, direction), the sampled throughput (Mbit/s, real) over scenario time from
    the cell's measured window's start (or its first request), from net.jsonl; slices that
    carried nothing are left out."""
    samples = [r for r in read_jsonl(cell_dir / "net.jsonl") if r.get("ue") is None]
    if not samples:
        return {}
    info_path = cell_dir / "cell.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    clock = ScenarioClock.of_cell(info)
    t0 = info.get("measure_started")
    if t0 is None:
        sent = [r["sent"] for f in sorted((cell_dir / "requests").glob("*.jsonl"))
                for r in read_jsonl(f)]
        t0 = min(sent) if sent else samples[0]["t"]
    out: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: {"t": [], "mbit": []})
    for r in samples:
        if r.get("rate_mbit") is None:
            continue
        s = out[(r["slice"], r["direction"])]
        s["t"].append(clock.scenario(r["t"] - t0))
        s["mbit"].append(r["rate_mbit"])
    return {k: v for k, v in out.items() if any(m > 0.05 for m in v["mbit"])}


def slice_throughput(cell_dir: Path, out: Path, name: str, title: str | None = None) -> Path | None:
    """One cell repetition's throughput per slice over scenario time (uplink solid, downlink
    dashed), above the services' latency (p50 solid, p99 dashed) on the same axis; None without
    network samples."""
    series = slice_series(cell_dir)
    if not series:
        return None
    buckets = latency_buckets(cell_dir)
    fig, (net, lat) = plt.subplots(2, 1, figsize=(9, 6), sharex=True,
                                   gridspec_kw={"height_ratios": [1.2, 1]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    slices = sorted({s for s, _ in series})
    for (slice_, direction), s in sorted(series.items()):
        color = colors[slices.index(slice_) % len(colors)]
        label = "unsliced" if slice_ == "-" else f"slice {slice_}"
        net.plot(s["t"], s["mbit"], color=color, linewidth=1.1,
                 linestyle="-" if direction == "uplink" else "--", label=f"{label} {direction}")
    net.set_ylabel("throughput (Mbit/s)\nper second, HTB counters")
    net.set_ylim(bottom=0)
    for k, (service, b) in enumerate(sorted(buckets.items())):
        color = colors[(len(slices) + k) % len(colors)]
        lat.plot(b["t"], b["p50"], color=color, linewidth=1.2, marker=".", markersize=3,
                 label=f"{service} p50")
        lat.plot(b["t"], b["p99"], color=color, linewidth=0.9, linestyle="--",
                 label=f"{service} p99")
    lat.set_ylabel("latency (ms)\np50 solid, p99 dashed")
    if buckets:
        lat.set_yscale("log")
    lat.set_xlabel("scenario time (s), from the measured window's start (or the first request)")
    for ax in (net, lat):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, ncol=2, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, out / f"net-{name}.png")

