"""Plots of a run: Fig 5.7/5.8-style bars and latency CDFs; over time replicas, request rate, latency and SLO
violations; iperf3."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from testbed.clock import ScenarioClock
from testbed.profiles.paper import FIG_5_7_5_8_VALUES, FIG_FLOWS, SERVICE_TITLES
from testbed.scenario.results import SLO_MS, percentile
from testbed.scenario.rundir import read_jsonl

TITLES = SERVICE_TITLES  # a service the paper did not name is titled by its name


def _mean(vals: list[float]) -> float | None:
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else None


def _save(fig: Any, path: Path) -> Path:
    """Lay out, write at the report's resolution and free the figure."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _note_if_all_zero(ax: Any, values: list[float], what: str = "no violations") -> None:
    """An all-zero panel is a finding, not a missing plot: say it on the panel."""
    if values and not any(values):
        ax.text(0.5, 0.5, what, transform=ax.transAxes, ha="center", va="center", fontsize=11,
                color="#555555")


def slicing_bars(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    """Per service: SLO violation rate and mean latency vs iperf3 flows, slice on/off, with the
    values behind Figs 5.7/5.8 marked on each bar where the figures have one."""
    figure = {(f.service, f.metric): f for f in FIG_5_7_5_8_VALUES}
    paper_services = {f.service for f in FIG_5_7_5_8_VALUES}
    svc_rows = [r for r in rows if "service" in r and "iperf_flows" in r and "slicing" in r]
    paths = []
    for service in sorted({r["service"] for r in svc_rows}):
        mine = [r for r in svc_rows if r["service"] == service]
        flows = sorted({r["iperf_flows"] for r in mine})
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        for ax, metric, label in ((axes[0], "slo_violation_rate", "SLO violation rate"),
                                  (axes[1], "mean_latency_ms", "mean processing time (ms)")):
            width = 0.38
            shown: list[float] = []
            for k, slicing in enumerate((False, True)):
                ys = [_mean([r.get(metric) for r in mine if r["iperf_flows"] == f
                             and bool(r["slicing"]) == slicing]) or 0.0 for f in flows]
                shown += ys
                xs = [i + (k - 0.5) * width for i in range(len(flows))]
                ax.bar(xs, ys, width, label="with slice" if slicing else "no slice",
                       color="#2a7ab9" if slicing else "#d9822b")
                series = figure.get((service, metric))
                marks = [(x, series.value(slicing, f)) for x, f in zip(xs, flows, strict=True)
                         if series is not None and f in FIG_FLOWS]
                if marks:
                    ax.plot([x for x, _ in marks], [y for _, y in marks], linestyle="none",
                            marker="D", markerfacecolor="white", markeredgecolor="black",
                            label="paper's figure" if slicing else None)
                    shown += [y for _, y in marks]
            ax.set_xticks(range(len(flows)), [str(f) for f in flows])
            ax.set_xlabel("iperf3 flows")
            ax.set_ylabel(label)
            ax.set_ylim(bottom=0)  # all-zero bars otherwise get an axis centred on 0
            ax.grid(axis="y", alpha=0.3)
            if metric == "slo_violation_rate":
                _note_if_all_zero(ax, shown)
        for ax in axes:
            if ax.get_legend_handles_labels()[0] and (ax is axes[0] or service in paper_services):
                ax.legend(fontsize=8)
        fig.suptitle(f"{TITLES.get(service, service)}: with and without a dedicated slice"
                     + (" (◇ the paper's figure)" if service in paper_services else ""))
        path = _save(fig, out / f"slicing-{service}.png")
        paths.append(path)
    return paths


def latency_cdfs(run_dir: Path, out: Path) -> list[Path]:
    """Per service of a slicing run: the latency CDF of every (iperf3 flows, slice) cell, all
    repetitions pooled, with the SLO marked: the tail behind Fig 5.7's SLO panel (or its
    absence), which a mean hides. Errors count as beyond every latency."""
    cells: dict[str, dict[tuple[int, bool], list[float]]] = defaultdict(lambda: defaultdict(list))
    slo_of: dict[str, float] = {}
    for info_path in sorted(run_dir.glob("cells/*/rep-*/cell.json")):
        info = json.loads(info_path.read_text())
        params = info.get("params") or {}
        if "iperf_flows" not in params or "slicing" not in params:
            continue
        clock = ScenarioClock.of_cell(info)
        key = (int(params["iperf_flows"]), bool(params["slicing"]))
        for f in sorted((info_path.parent / "requests").glob("*.jsonl")):
            for r in read_jsonl(f):
                lat = math.inf if r.get("error") is not None else clock.scenario_ms_of(r)
                cells[r["service"]][key].append(lat)
        for service, ms in (info.get("slo_ms") or {}).items():
            slo_of[service] = ms
    paths = []
    for service, by_cell in sorted(cells.items()):
        fig, ax = plt.subplots(figsize=(7, 4))
        flows = sorted({f for f, _ in by_cell})
        shades = {f: 0.35 + 0.65 * (i + 1) / len(flows) for i, f in enumerate(flows)}
        for (f, on), lat in sorted(by_cell.items()):
            xs = sorted(lat)
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            cmap = plt.get_cmap("Blues" if on else "Oranges")
            ax.step(xs, ys, where="post", color=cmap(shades[f]), linestyle="-" if on else "--",
                    label=f"{f} flows, {'with slice' if on else 'no slice'}")
        slo = slo_of.get(service, SLO_MS.get(service))
        if slo is not None:
            ax.axvline(slo, color="k", linewidth=1, linestyle=":", label=f"SLO {slo:g} ms")
        ax.set_xscale("log")
        ax.set_xlabel("latency (ms, log scale)")
        ax.set_ylabel("share of requests at or below")
        ax.set_ylim(0, 1.01)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="lower right")
        ax.set_title(f"{TITLES.get(service, service)}: latency distribution per cell")
        path = _save(fig, out / f"slicing-cdf-{service}.png")
        paths.append(path)
    return paths


def service_bars(rows: list[dict[str, Any]], out: Path) -> Path | None:
    """SLO violation rate and mean latency per cell and service."""
    svc_rows = [r for r in rows if "service" in r and r.get("requests")]
    if not svc_rows:
        return None
    cells = sorted({r["cell"] for r in svc_rows})
    services = sorted({r["service"] for r in svc_rows})
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(cells) + 4), 3.8))
    width = 0.8 / len(services)
    for ax, metric, label in ((axes[0], "slo_violation_rate", "SLO violation rate"),
                              (axes[1], "mean_latency_ms", "mean latency (ms)")):
        shown: list[float] = []
        for k, service in enumerate(services):
            ys = [_mean([r.get(metric) for r in svc_rows if r["cell"] == c
                         and r["service"] == service]) or 0.0 for c in cells]
            shown += ys
            ax.bar([i + (k - (len(services) - 1) / 2) * width for i in range(len(cells))], ys,
                   width, label=service)
        ax.set_xticks(range(len(cells)), [c.split("-", 1)[1] for c in cells], rotation=20,
                      ha="right", fontsize=8)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
        if metric == "slo_violation_rate":
            _note_if_all_zero(ax, shown)
    axes[0].legend()
    path = _save(fig, out / "services.png")
    return path


def timeseries(cell_dir: Path, out: Path, name: str, title: str | None = None) -> Path | None:
    """One cell repetition over scenario time: ready replicas, request rate, latency (p50 and
    p99 per time bucket, from the request records) and the SLO violation rate per bucket."""
    samples = read_jsonl(cell_dir / "samples.jsonl")
    if not samples:
        return None
    by_service: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        by_service[s["service"]].append(s)
    buckets = latency_buckets(cell_dir)
    fig, axes = plt.subplots(4, 1, figsize=(9, 9.5), sharex=True,
                             gridspec_kw={"height_ratios": [1, 1, 1.4, 1]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (service, rows) in enumerate(sorted(by_service.items())):
        _plot_service(axes, k, service, rows, buckets.get(service), colors[k % len(colors)])
    axes[0].set_ylabel("ready replicas")
    # whole replicas on the axis: the small offsets above must not read as 0.96 replicas
    counts = [r["ready"] for r in samples]
    axes[0].set_ylim(min(counts) - 0.5, max(counts) + 0.5)
    axes[0].yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    axes[1].set_ylabel("requests/s\n(5 s mean)")
    # from zero (an auto-scaled 29.4-30.2 makes noise look dramatic), a little below it so that
    # a rate of 0 does not lie on the frame
    axes[1].set_ylim(-0.03 * max(axes[1].get_ylim()[1], 1e-9), axes[1].get_ylim()[1] * 1.03)
    bucket_s = next(iter(buckets.values()))["bucket_s"] if buckets else None
    per = f" per {bucket_s:g} s" if bucket_s else ""
    axes[2].set_ylabel(f"latency (ms){per}\np50 solid, p99 dashed")
    if buckets:
        axes[2].set_yscale("log")
        axes[2].text(0.995, 0.02, "dotted: SLO", transform=axes[2].transAxes, ha="right",
                     va="bottom", fontsize=7, alpha=0.8)
    axes[3].set_ylabel(f"SLO violations (%)\n{per.strip()}")
    worst = max((v for b in buckets.values() for v in b["violation_rate"]), default=0.0)
    axes[3].set_ylim(*violation_ylim(worst))
    _note_if_all_zero(axes[3], [v for b in buckets.values() for v in b["violation_rate"]])
    _shade_warmup(axes, cell_dir)
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, ncol=2 if ax is axes[2] else 1, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=10)
    path = _save(fig, out / f"timeseries-{name}.png")
    return path


def _plot_service(axes: Any, k: int, service: str, rows: list[dict[str, Any]],
                  bucket: dict[str, Any] | None, color: str) -> None:
    """Service `service` (the k-th) on the four panels: its ready replicas and request rate from
    its samples, and where the request records give them (`bucket`), its latency and violations."""
    t = [r["t"] for r in rows]
    # offset the step lines a little so services with equal counts stay visible
    axes[0].step(t, [r["ready"] + 0.04 * (k - 1) for r in rows], where="post", label=service,
                 color=color)
    rate_t, rate = _rates(rows)
    axes[1].plot(rate_t, rate, label=service, linewidth=0.9, color=color)
    b = bucket
    if b is None:
        return
    axes[2].plot(b["t"], b["p50"], color=color, linewidth=1.2, marker=".", markersize=3,
                 label=f"{service} p50")
    axes[2].plot(b["t"], b["p99"], color=color, linewidth=0.9, linestyle="--",
                 label=f"{service} p99")
    if b["slo_ms"]:
        axes[2].axhline(b["slo_ms"], color=color, linewidth=0.8, linestyle=":", alpha=0.8)
    axes[3].step(b["t"], [100 * v for v in b["violation_rate"]], where="mid", color=color,
                 label=service)


def _shade_warmup(axes: Any, cell_dir: Path) -> None:
    """The cell's warm-up shaded on every panel (where it had one), and the time axis's label."""
    info = json.loads((cell_dir / "cell.json").read_text()) if (cell_dir / "cell.json").exists() \
        else {}
    if info.get("warmup_s"):
        for ax in axes:
            ax.axvspan(-info["warmup_s"], 0, color="0.9", zorder=0)
        axes[3].set_xlabel("scenario time (s), from the measured window's start (shaded: the "
                           "warm-up, not in the results)")
    else:
        axes[3].set_xlabel("scenario time (s), from the first request")


def violation_ylim(worst: float) -> tuple[float, float]:
    """The violation panel's y-limits (%) for its worst rate (0..1): small rates stay visible, and
    every line, 0 % and 100 % among them, lies inside the frame, not on it."""
    top = max(10.0, 115 * worst)
    return -top * 0.03, min(top, 106.0)


def latency_buckets(cell_dir: Path, n_buckets: int = 40) -> dict[str, dict[str, Any]]:
    """Per service, the request records in time buckets of scenario time (by send time, from
    the measured window's start, the cell's first request without a warm-up; a warm-up's buckets
    come before 0): p50/p99 latency of the answered requests and the share that violated the SLO
    (an error, or slower than the SLO), both in scenario time."""
    info_path = cell_dir / "cell.json"
    if not info_path.exists():
        return {}
    info = json.loads(info_path.read_text())
    clock = ScenarioClock.of_cell(info)
    records = [r for f in sorted((cell_dir / "requests").glob("*.jsonl")) for r in read_jsonl(f)]
    if not records:
        return {}
    t0 = info.get("measure_started") or min(r["sent"] for r in records)
    lo = -float(info.get("warmup_s") or 0.0)
    duration = float(info.get("measured_s") or info.get("duration_s") or 0.0)
    span = max(duration, max(clock.scenario(r["sent"] - t0) for r in records), 1.0) - lo
    bucket_s = _nice(span / n_buckets)
    slo = info.get("slo_ms") or {}
    grouped: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        t = clock.scenario(r["sent"] - t0) - lo
        if t >= 0:
            grouped[r["service"]][int(t // bucket_s)].append(r)
    out = {}
    for service, by_bucket in grouped.items():
        slo_ms = slo.get(service, SLO_MS.get(service))
        series: dict[str, Any] = {"t": [], "p50": [], "p99": [], "violation_rate": [],
                                  "bucket_s": bucket_s, "slo_ms": slo_ms}
        for i in sorted(by_bucket):
            rows = by_bucket[i]
            lat = [clock.scenario_ms_of(r) for r in rows if r.get("error") is None]
            bad = sum(1 for r in rows if r.get("error") is not None
                      or (slo_ms is not None and clock.scenario_ms_of(r) > slo_ms))
            series["t"].append(lo + (i + 0.5) * bucket_s)
            series["p50"].append(percentile(lat, 0.5) if lat else float("nan"))
            series["p99"].append(percentile(lat, 0.99) if lat else float("nan"))
            series["violation_rate"].append(bad / len(rows))
        out[service] = series
    return out


def _nice(x: float) -> float:
    """The next of 1, 2, 5 × 10^k at or above x (bucket widths that read well on an axis)."""
    k = 10 ** math.floor(math.log10(x)) if x > 0 else 1.0
    return next(m * k for m in (1, 2, 5, 10) if m * k >= x)


def _rates(rows: list[dict[str, Any]], span: int = 5) -> tuple[list[float], list[float]]:
    """Arrival rate from the cumulative counter, over `span` samples."""
    ts, out = [], []
    for i in range(span, len(rows)):
        dt = rows[i]["t"] - rows[i - span]["t"]
        if dt > 0:
            ts.append(rows[i]["t"])
            out.append((rows[i]["arrivals_total"] - rows[i - span]["arrivals_total"]) / dt)
    return ts, out


def iperf_bars(rows: list[dict[str, Any]], out: Path) -> Path | None:
    ip = [r for r in rows if r.get("iperf_goodput_mbit") is not None]
    if not ip:
        return None
    cells = sorted({r["cell"] for r in ip})
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(cells) + 3), 3.5))
    ys = [_mean([r["iperf_goodput_mbit"] for r in ip if r["cell"] == c]) or 0 for c in cells]
    ax.bar(range(len(cells)), ys, color="#6a6a6a")
    ax.set_xticks(range(len(cells)), [c.split("-", 1)[1] for c in cells], rotation=20,
                  ha="right", fontsize=8)
    ax.set_ylabel("iperf3 goodput (Mbit/s)")
    ax.grid(axis="y", alpha=0.3)
    path = _save(fig, out / "iperf.png")
    return path
