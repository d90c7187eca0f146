"""Table 5.4 over a long window (the whole test day) in checkpointed segments: the window is cut
into segments of T54_SEGMENT_S of the test day, each one scenario run (after a warm-up that
replays the trace before it, so that the replicas meet it as the run before left them), and each
segment's result rows are kept in `<out>.partial/t54/` as soon as it finishes. An interrupted
reproduce resumes after the last finished segment (`testbed reproduce table5.4 --resume DIR`);
the segments' rows are then combined into one row per policy, repetition and service.

A window no longer than one segment runs as one scenario run, as before. A segment whose clients
fell behind their schedule (the machine did not hold the time scale: other work beside it, a
hypervisor stealing time) runs again at the next lower time scale (`testbed.scenario.pace.
candidates`), and the segments after it run at that one too; the run says so in one line with
the host's figures, and the lowered scale is kept beside the segments (a resume goes on at it).
Behind at time scale 1 it runs once more (a passing load), and behind again the reproduce stops
there with MachineBehind and keeps nothing for it, so that a resume runs it first.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.errors import MachineBehind
from testbed.scenario.machine import host_line
from testbed.scenario.pace import candidates
from testbed.scenario.results import behind_cells

T54_SEGMENT_S = 3600  # a checkpoint every hour of the test day
SEGMENT_WARMUP_S = 120  # the trace's two minutes before a segment, not measured (4 scaler periods)

# how each figure of a service row combines over segments: weighted by the row's requests, by
# its scaler decisions (by the segment's seconds where a row has no such count, as the
# simulator's), by the segment's measured seconds; counts add up
BY_REQUESTS = ("slo_violation_rate", "mean_latency_ms", "mean_sched_latency_ms")
# percentiles do not combine from the segments' own: left out of a combined row
NOT_COMBINED = ("p50_latency_ms", "p99_latency_ms", "p99_lateness_ms", "latency_sd_ms")
BY_DECISIONS = ("reward",)
BY_SECONDS = ("mean_replicas",)
SUMMED = ("requests", "decisions", "warmup_requests", "planned_requests", "lost_requests")

RunSegment = Callable[[dict[str, Any]], tuple[Path, list[dict[str, Any]]]]


def segments(start_s: int, duration_s: float, segment_s: float) -> list[tuple[int, float]]:
    """(start in seconds of the test day, length) of each segment of the window."""
    out, at, end = [], float(start_s), start_s + duration_s
    while at < end - 1e-9:
        out.append((int(at), min(segment_s, end - at)))
        at += segment_s
    return out


def lowered_time_scale(partial: Path) -> tuple[float, int] | None:
    """The time scale a run's segments came down to after falling behind, and the first segment
    run at it (0-based); None when none fell behind."""
    lowered = partial / "t54" / "time-scale.json"
    if not lowered.is_file():
        return None
    kept = json.loads(lowered.read_text())
    return float(kept["time_scale"]), int(kept["from_segment"])


def run_segments(data: dict[str, Any], *, start_s: int, duration_s: float, warmup_s: float,
                 partial: Path, run: RunSegment, progress: Callable[[str], None] = print,
                 segment_s: float | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """Run the scenario `data` (clients without start_s, no duration) over the window segment by
    segment, keeping each finished segment's rows in `partial`/t54/; segments found there are
    not run again. Returns the segments' run directories and the rows combined over segments.

    warmup_s: the first segment's warm-up (the later ones replay SEGMENT_WARMUP_S before them);
    run: runs one scenario (its data) and returns its run directory and result rows;
    segment_s: the segments' length (default T54_SEGMENT_S)."""
    parts = segments(start_s, duration_s, segment_s or T54_SEGMENT_S)
    kept = partial / "t54"
    kept.mkdir(parents=True, exist_ok=True)
    lowered = kept / "time-scale.json"  # a scale a segment fell behind at and came down from
    scale = float(json.loads(lowered.read_text())["time_scale"] if lowered.is_file()
                  else data.get("time_scale", 1.0))
    run_dirs: list[str] = []
    per_segment: list[tuple[float, list[dict[str, Any]]]] = []
    for i, (at, length) in enumerate(parts):
        saved = kept / f"segment-{i:03d}-{at}.json"
        name = f"Table 5.4 segment {i + 1}/{len(parts)}"
        doc = json.loads(saved.read_text()) if saved.is_file() else None
        # kept by a run before this check, its clients behind: that was its first try
        behind = behind_cells(partial / doc["run_dir"]) if doc is not None else {}
        if doc is not None and not behind:
            progress(f"{name}: resumed from {saved}")
        else:
            seg = _segment_data(data, at, length, scale,
                                warmup_s if i == 0 else min(SEGMENT_WARMUP_S, at))
            if behind:
                progress(f"{name}: kept, but its clients fell behind ({_late(behind)}); running "
                         f"it again at time scale {scale:g}")
            elif len(parts) > 1:
                progress(f"{name}: {length:g} s from {_clock(at)}")
            run_dir, rows, behind, scale = _run_held(
                seg, run, partial, again=bool(behind),  # a kept one behind had its try at this scale
                report=lambda line, name=name: progress(f"{name}: {line}"), lowered=lowered, index=i)
            if behind:
                saved.unlink(missing_ok=True)
                raise MachineBehind(
                    f"{name} (from {_clock(at)}) fell behind even at time scale {scale:g} "
                    f"({_late(behind)}, over a tenth of the SLO): nothing is kept for it; resume "
                    f"on a quieter machine (bench/time_scale.py measures which time scale it holds)")
            doc = {"start_s": at, "duration_s": length, "run_dir": str(run_dir), "rows": rows}
            _keep(saved, doc)
        run_dirs.append(doc["run_dir"])
        per_segment.append((doc["duration_s"], doc["rows"]))
    if len(per_segment) == 1:
        return run_dirs, per_segment[0][1]
    return run_dirs, combine_rows(per_segment)


def _run_held(seg: dict[str, Any], run: RunSegment, partial: Path, *, again: bool,
              report: Callable[[str], None], lowered: Path,
              index: int) -> tuple[Path, list[dict[str, Any]], dict[str, dict[str, float]], float]:
    """Run segment `index` (its scenario `seg`) until its clients hold their schedule: behind, at
    the next lower time scale (kept in `lowered` for the segments after it and a resume), at the
    lowest once more unless `again` (it had that try). Returns its run directory, rows, the cells
    still behind (none: it held) and the time scale it ran at."""
    scale = seg["time_scale"]
    while True:
        run_dir, rows = run(seg)
        behind = behind_cells(partial / run_dir)
        if not behind:
            break
        why = f"{_late(behind)}{_host(partial / run_dir)}"
        lower = next((c for c in candidates(scale) if c < scale), None)
        if lower is not None:
            report(f"the machine fell behind at time scale {scale:g} ({why}); "
                   f"running it, and the segments after it, at time scale {lower:g}")
            scale = lower
            lowered.write_text(json.dumps({"time_scale": scale, "from_segment": index}))
            seg = {**seg, "time_scale": scale}
        elif not again:  # at the lowest scale: once more, as a timed test is re-run
            report(f"the machine fell behind at time scale {scale:g} ({why}); running it once more")
            again = True
        else:
            break
    return run_dir, rows, behind, scale


def _segment_data(data: dict[str, Any], at: int, length: float, scale: float,
                  warmup_s: float) -> dict[str, Any]:
    """The scenario `data` as one segment's run: its clients from `at`, for `length` seconds."""
    return {**data, "clients": [{**c, "start_s": at} for c in data["clients"]],
            "duration_s": length, "time_scale": scale, "warmup_s": warmup_s}


def _keep(saved: Path, doc: dict[str, Any]) -> None:
    """A finished segment's document written whole or not at all: a resume never reads half."""
    tmp = saved.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, default=str))
    tmp.replace(saved)


def _host(run_dir: Path) -> str:
    """"; host: ..." for the first behind cell's host figures (steal, other work), "" without."""
    for p in sorted(run_dir.glob("cells/*/rep-*/cell.json")):
        info = json.loads(p.read_text())
        if info.get("status") == "behind" and info.get("host"):
            line = host_line(info["host"], "clients")
            return f"; {line}" if line else ""
    return ""


def _clock(at: int) -> str:
    return f"{at // 3600:02d}:{at % 3600 // 60:02d}"


def _late(behind: dict[str, dict[str, float]]) -> str:
    """'imgcls p99 52 ms late, ...' (scenario time): each service's worst over the cells."""
    worst: dict[str, float] = {}
    for late in behind.values():
        for service, ms in late.items():
            worst[service] = max(ms, worst.get(service, 0.0))
    return ", ".join(f"{s} p99 {ms:.0f} ms late" for s, ms in sorted(worst.items()))


def combine_rows(per_segment: list[tuple[float, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """One service row per (engine, policy, repetition, service) from each segment's rows (its
    measured seconds and rows): figures weighted as BY_REQUESTS, BY_DECISIONS and BY_SECONDS say,
    counts summed, percentiles left out; a cell failed in any segment is failed. Rows without a
    service (iperf3) are left out."""
    groups: dict[tuple[Any, ...], list[tuple[float, dict[str, Any]]]] = {}
    for seconds, rows in per_segment:
        for r in rows:
            if r.get("service") is None:
                continue
            key = (r.get("engine"), r.get("policy"), r.get("rep"), r["service"])
            groups.setdefault(key, []).append((seconds, r))
    out = []
    for parts in groups.values():
        row = dict(parts[0][1])
        for col in (*BY_REQUESTS, *BY_DECISIONS, *BY_SECONDS):
            weight = ("requests" if col in BY_REQUESTS else "decisions" if col in BY_DECISIONS
                      else None)
            if weight and any(r.get(weight) is None for _, r in parts):
                weight = None  # the simulator's rows count no requests: by seconds
            pairs = [((r.get(weight) or 0) if weight else s, r.get(col)) for s, r in parts]
            pairs = [(w, v) for w, v in pairs if v is not None and w > 0]
            total = sum(w for w, _ in pairs)
            row[col] = sum(w * v for w, v in pairs) / total if total else None
        for col in SUMMED:
            vals = [r.get(col) for _, r in parts if r.get(col) is not None]
            row[col] = sum(vals) if vals else None
        for col in NOT_COMBINED:
            row.pop(col, None)
        statuses = [r.get("status") for _, r in parts]
        row["status"] = next((s for s in statuses if s != "ok"), "ok")
        row["segments"] = len(parts)
        out.append(row)
    return out
