"""The policy comparison's report: a directory with compare.json, compare.md, the share held over
time and the Pareto plot (SLO violation rate against share held), from `testbed sim compare`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLUMNS = (
    ("policy", "policy", "{}"),
    ("load", "load", "{}"),
    ("SLO violation", "slo_violation_rate", "{:.4f}"),
    ("share used (units)", "share_units", "{:.3f}"),
    ("throughput (req/s in SLO)", "throughput", "{:.2f}"),
    ("reward", "reward", "{:.4f}"),
    ("decision (ms/step)", "decide_ms", "{:.2f}"),
    ("share bound", "bound", "{:.4f}"),
)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(c[0] for c in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        lines.append("| " + " | ".join(fmt.format(r[key]) for _, key, fmt in COLUMNS) + " |")
    return "\n".join(lines)


CHAIN_COLUMNS = (
    ("policy", "policy", "{}"),
    ("load", "load", "{}"),
    ("pipeline", "pipeline", "{}"),
    ("SLA (ms)", "sla_ms", "{:g}"),
    ("chain violation", "violation_rate", "{:.4f}"),
    ("late", "late", "{}"),
    ("dropped", "dropped", "{}"),
    ("end to end mean (ms)", "mean_e2e_ms", "{:.0f}"),
    ("p99 (ms)", "p99_e2e_ms", "{:.0f}"),
    ("req/s in SLA", "on_time_rps", "{:.2f}"),
    ("share used (units)", "share_units", "{:.3f}"),
)


def chain_table(rows: Sequence[dict[str, Any]]) -> str:
    """One line per policy, load and routed chain (rows without `chains` have none)."""
    lines = ["| " + " | ".join(c[0] for c in CHAIN_COLUMNS) + " |", "|" + "---|" * len(CHAIN_COLUMNS)]
    for r in rows:
        for c in r.get("chains") or []:
            cell = {**c, "policy": r["policy"], "load": r["load"], "share_units": r["share_units"]}
            lines.append("| " + " | ".join(fmt.format(cell[key]) for _, key, fmt in CHAIN_COLUMNS) + " |")
    return "\n".join(lines)


def write_compare_report(rows: Sequence[dict[str, Any]], out: Path, note: str = "") -> list[Path]:
    """rows: PolicyResult.as_json(with_series=True) dicts. Returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "compare.json", out / "compare.md"]
    (out / "compare.json").write_text(json.dumps(list(rows), indent=1) + "\n", encoding="utf-8")
    for load in sorted({r["load"] for r in rows}):
        mine = [r for r in rows if r["load"] == load]
        paths.append(_share_over_time(mine, out / f"share-{_slug(load)}.png", load))
        paths.append(_pareto(mine, out / f"pareto-{_slug(load)}.png", load))
    body = ["# Policies on the GPU simulator", "", note, "", markdown_table(rows), ""]
    if any(r.get("chains") for r in rows):
        body += ["## Routed chains", "", chain_table(rows), ""]
    body += [f"![{p.stem}]({p.name})" for p in paths[2:]]
    (out / "compare.md").write_text("\n".join(body) + "\n", encoding="utf-8")
    return paths


def _slug(load: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in load).strip("-") or "load"


SMOOTH_STEPS = 60  # 30 min of 30 s steps


def _share_over_time(rows: Sequence[dict[str, Any]], path: Path, load: str) -> Path:
    fig, ax = plt.subplots(figsize=(10, 4.2))
    colours = plt.get_cmap("tab10").colors
    for k, r in enumerate(rows):
        series = np.asarray(r.get("share_series") or [], dtype=float)
        if len(series) >= SMOOTH_STEPS:
            series = np.convolve(series, np.ones(SMOOTH_STEPS) / SMOOTH_STEPS, mode="valid")
            offset = SMOOTH_STEPS
        else:
            offset = 1
        hours = 30.0 * (np.arange(len(series)) + offset) / 3600.0
        ax.plot(hours, series, label=r["policy"], linewidth=1.4, color=colours[k % 10],
                linestyle="-" if k < 10 else "--")
    ax.set_xlabel("hour of the test day")
    ax.set_ylabel("GPU share held (units of 25 %)")
    ax.set_title(f"Share held by the services compared, mean of the last 30 min ({load})")
    ax.grid(alpha=0.3)
    ax.legend(ncol=4, fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _pareto(rows: Sequence[dict[str, Any]], path: Path, load: str) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.8))
    colours = plt.get_cmap("tab10").colors
    for k, r in enumerate(rows):
        x, y = r["share_units"], 100.0 * r["slo_violation_rate"]
        ax.scatter([x], [y], s=40, color=colours[k % 10])
        ax.annotate(r["policy"], (x, y), textcoords="offset points", xytext=(4, 4 + 9 * (k % 3)),
                    fontsize=8, color=colours[k % 10])
    front = _front([(r["share_units"], 100.0 * r["slo_violation_rate"]) for r in rows])
    if len(front) > 1:
        ax.plot(*zip(*front, strict=True), linestyle="--", color="grey", linewidth=0.8, label="Pareto front")
        ax.legend(fontsize=8)
    ax.set_yscale("symlog", linthresh=0.1)  # 0-0.1 % linear, log above: static's 40 % fits too
    ax.set_xlabel("mean GPU share held (units of 25 %)")
    ax.set_ylabel("SLO violation rate (%, log above 0.1)")
    ax.set_title(f"SLO violations against share held ({load})")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points no other point beats on both share and violations, by share."""
    out: list[tuple[float, float]] = []
    for x, y in sorted(points):
        if not out or y < out[-1][1]:
            out.append((x, y))
    return out
