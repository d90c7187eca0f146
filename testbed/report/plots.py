"""Plots of a run: Fig 5.7/5.8-style bars, time series of replicas and request rate, iperf3."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from testbed.scenario.rundir import read_jsonl

TITLES = {"chatbot": "Chatbot", "imgcls": "Image classification", "tts": "Text to speech"}


def _mean(vals: list[float]) -> float | None:
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else None


def slicing_bars(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    """Per service: SLO violation rate and mean latency vs iperf3 flows, slice on/off."""
    svc_rows = [r for r in rows if "service" in r and "iperf_flows" in r and "slicing" in r]
    paths = []
    for service in sorted({r["service"] for r in svc_rows}):
        mine = [r for r in svc_rows if r["service"] == service]
        flows = sorted({r["iperf_flows"] for r in mine})
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        for ax, metric, label in ((axes[0], "slo_violation_rate", "SLO violation rate"),
                                  (axes[1], "mean_latency_ms", "mean processing time (ms)")):
            width = 0.38
            for k, slicing in enumerate((False, True)):
                ys = [_mean([r.get(metric) for r in mine if r["iperf_flows"] == f
                             and bool(r["slicing"]) == slicing]) or 0.0 for f in flows]
                xs = [i + (k - 0.5) * width for i in range(len(flows))]
                ax.bar(xs, ys, width, label="with slice" if slicing else "no slice",
                       color="#2a7ab9" if slicing else "#d9822b")
            ax.set_xticks(range(len(flows)), [str(f) for f in flows])
            ax.set_xlabel("iperf3 flows")
            ax.set_ylabel(label)
            ax.grid(axis="y", alpha=0.3)
        axes[0].legend()
        fig.suptitle(f"{TITLES.get(service, service)}: with and without a dedicated slice")
        fig.tight_layout()
        path = out / f"slicing-{service}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
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
        for k, service in enumerate(services):
            ys = [_mean([r.get(metric) for r in svc_rows if r["cell"] == c
                         and r["service"] == service]) or 0.0 for c in cells]
            ax.bar([i + (k - (len(services) - 1) / 2) * width for i in range(len(cells))], ys,
                   width, label=service)
        ax.set_xticks(range(len(cells)), [c.split("-", 1)[1] for c in cells], rotation=20,
                      ha="right", fontsize=8)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    path = out / "services.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def timeseries(cell_dir: Path, out: Path, name: str) -> Path | None:
    """Ready replicas and request rate over time for one cell repetition."""
    samples = read_jsonl(cell_dir / "samples.jsonl")
    if not samples:
        return None
    by_service: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        by_service[s["service"]].append(s)
    fig, axes = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    for k, (service, rows) in enumerate(sorted(by_service.items())):
        t = [r["t"] for r in rows]
        # offset the step lines a little so services with equal counts stay visible
        axes[0].step(t, [r["ready"] + 0.04 * (k - 1) for r in rows], where="post", label=service)
        rate_t, rate = _rates(rows)
        axes[1].plot(rate_t, rate, label=service, linewidth=0.9)
    axes[0].set_ylabel("ready replicas")
    axes[1].set_ylabel("requests/s (5 s mean)")
    axes[1].set_xlabel("scenario time (s), from the first request")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / f"timeseries-{name}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


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
    fig.tight_layout()
    path = out / "iperf.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
