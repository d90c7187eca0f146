#!/usr/bin/env python3
"""Which time scale this machine holds for Table 5.4's testbed run, and whether a time-scaled
window gives the figures of time scale 1 (prints figures; not a test). Needs root.

Runs scenarios/slo-testbed.yaml (the three services, the test day at ratios 0.15/0.4/0.15, 8 units)
on one window of the test day at each time scale asked for: 1 with the replicas' real work
(decoding JPEGs, synthesising WAVs), above 1 with replicas sleeping their profile's time
(`replica_work: sleep`). Per time scale it prints the wall time, how busy the CPUs were, and per
service the clients' p99 lateness in scenario time (a scale the machine does not hold shows here
first: the clients cannot send on time), SLO violations, instances, mean latency and reward, and
the host's figures over the cell (the hypervisor's steal, the other work's share of the CPUs:
testbed.metrics.host). A cell the machine fell behind in says MACHINE BEHIND, with the line that
names its cause and the host's figures, and is compared with nothing.

Then, per time scale above 1, each service's reward and SLO rate minus time scale 1's, against
the margin the whole-day table is judged with (TB_REWARD_ABS / TB_SLO_ABS, the tolerance of a
Table 5.4 cell against the paper): a time scale is equivalent on this window when every
difference lies inside it.

    python3 bench/time_scale.py --scales 1,4,8,16 [--start 11:45] [--window 600] [--policy rule_v2]
    python3 bench/time_scale.py --from-json runs/time-scale.json     # figures of an earlier run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.api import load_scenario, run_scenario  # noqa: E402
from testbed.reproduce.tables import TB_REWARD_ABS, TB_SLO_ABS  # noqa: E402
from testbed.traces import PACKAGE, traces_folder  # noqa: E402

SCENARIO = ROOT / "scenarios" / "slo-testbed.yaml"


def cpu_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs so far (/proc/stat's first line)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def scenario(scale: float, *, start_s: int, window_s: float, policy: str, traces: Path,
             models: Path, warmup_s: float = 0.0) -> dict[str, Any]:
    data = yaml.safe_load(SCENARIO.read_text())
    data["traces_dir"] = str(traces.resolve())
    data["services"] = [
        {**s, "model": str((models / f"{s['name']}.zip").resolve())} if policy == "ppo"
        else {k: v for k, v in s.items() if k != "model"} for s in data["services"]]
    data["clients"] = [{**c, "start_s": start_s} for c in data["clients"]]
    data.update(duration_s=window_s, repetitions=1, warmup_s=warmup_s, time_scale=scale,
                replica_work="real" if scale == 1 else "sleep", matrix={"policy": [policy]},
                expect=[], markers=[], compare_sim=False)
    return data


def run_one(scale: float, args: argparse.Namespace) -> dict[str, Any]:
    data = scenario(scale, start_s=args.start_s, window_s=args.window, policy=args.policy,
                    traces=args.traces, models=args.models, warmup_s=args.warmup)
    loaded = load_scenario(data, base_dir=SCENARIO.parent)
    b0, t0 = cpu_busy()
    w0 = time.monotonic()
    result = run_scenario(loaded, out=args.out, report=False)
    wall = time.monotonic() - w0
    b1, t1 = cpu_busy()
    rows = {r["service"]: r for r in result.rows if r.get("service") and r.get("engine") != "sim"
            and r.get("slice") is None}
    infos = [json.loads(p.read_text()) for p in Path(result.run_dir).glob("cells/*/rep-*/cell.json")]
    host = next((i.get("host") for i in infos if i.get("host")), {}) or {}
    return {"scale": scale, "wall_s": wall, "cpu_busy": (b1 - b0) / max(t1 - t0, 1.0),
            "steal": host.get("steal_share"), "others": host.get("others_share"),
            "behind": [line for i in infos for line in (i.get("behind") or {}).values()],
            "run_dir": str(result.run_dir), "failed_cells": result.failed_cells if hasattr(
                result, "failed_cells") else [],
            "services": {s: {k: r.get(k) for k in ("requests", "p99_lateness_ms", "slo_violation_rate",
                                                    "mean_replicas", "mean_latency_ms", "reward",
                                                    "status")}
                         for s, r in rows.items()}}


def show(runs: list[dict[str, Any]]) -> bool:
    """Print the figures; True when every time scale above 1 is equivalent to time scale 1."""
    print(f"{'scale':>5} {'wall s':>7} {'CPU':>5} {'steal':>6} {'others':>6}  service   requests  "
          f"p99 late ms  SLO viol.  instances  mean ms   reward  cell")
    for r in runs:
        first = True
        steal = f"{100 * r['steal']:>5.1f}%" if r.get("steal") is not None else "     -"
        others = f"{100 * r['others']:>5.0f}%" if r.get("others") is not None else "     -"
        for s, v in r["services"].items():
            head = (f"{r['scale']:>5g} {r['wall_s']:>7.0f} {100 * r['cpu_busy']:>4.0f}% {steal} "
                    f"{others}" if first else " " * 33)
            first = False
            late = v["p99_lateness_ms"] if v["p99_lateness_ms"] is not None else float("nan")
            print(f"{head}  {s:<8} {v['requests'] or 0:>9} {late:>12.1f} "
                  f"{v['slo_violation_rate'] or 0:>10.4f} {v['mean_replicas'] or 0:>10.2f} "
                  f"{v['mean_latency_ms'] or 0:>8.0f} {v['reward'] or 0:>8.4f}  "
                  f"{'MACHINE BEHIND' if v['status'] == 'behind' else v['status'] or ''}")
    for r in runs:
        for line in r.get("behind") or []:
            print(f"  x{r['scale']:g} MACHINE BEHIND: {line}")
    base = next((r for r in runs if r["scale"] == 1 and not r.get("behind")), None)
    if base is None:
        return False
    ok = True
    print(f"\ndifference to time scale 1 (equivalent when |reward| <= {TB_REWARD_ABS} and "
          f"|SLO| <= {TB_SLO_ABS}):")
    for r in runs:
        if r["scale"] == 1:
            continue
        if r.get("behind"):
            print(f"  x{r['scale']:g} MACHINE BEHIND: not compared (the figures are the host's)")
            ok = False
            continue
        for s, v in r["services"].items():
            b = base["services"].get(s)
            if not b or v["reward"] is None or b["reward"] is None:
                continue
            dr = v["reward"] - b["reward"]
            ds = (v["slo_violation_rate"] or 0) - (b["slo_violation_rate"] or 0)
            eq = abs(dr) <= TB_REWARD_ABS and abs(ds) <= TB_SLO_ABS
            ok &= eq
            print(f"  x{r['scale']:g} {s:<8} reward {dr:+.4f}  SLO {ds:+.4f}  instances "
                  f"{(v['mean_replicas'] or 0) - (b['mean_replicas'] or 0):+.2f}  "
                  f"{'equivalent' if eq else 'NOT equivalent'}{within_x4(runs, r, s, dr, ds)}")
    return ok


def within_x4(runs: list[dict[str, Any]], run: dict[str, Any], service: str, dr: float,
              ds: float) -> str:
    """Whether a time scale above 4 keeps to the margin time scale 4 keeps against 1 (the larger
    of that difference and the tolerance), as text."""
    four = next((r for r in runs if r["scale"] == 4), None)
    base = next((r for r in runs if r["scale"] == 1), None)
    if four is None or base is None or run["scale"] <= 4:
        return ""
    f, b = four["services"].get(service), base["services"].get(service)
    if not f or not b or f["reward"] is None:
        return ""
    margin_r = max(abs(f["reward"] - b["reward"]), TB_REWARD_ABS)
    margin_s = max(abs((f["slo_violation_rate"] or 0) - (b["slo_violation_rate"] or 0)), TB_SLO_ABS)
    keeps = abs(dr) <= margin_r and abs(ds) <= margin_s
    return f"; {'within' if keeps else 'OUTSIDE'} x4's margin ({margin_r:.4f}, {margin_s:.4f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", default="1,4,8,16")
    ap.add_argument("--start", default="11:45", help="HH:MM of the test day (11:45: its busiest "
                    "10 minutes, about 31 requests/s at the paper's ratios)")
    ap.add_argument("--window", type=float, default=600.0, help="scenario seconds")
    ap.add_argument("--warmup", type=float, default=0.0,
                    help="scenario seconds of the trace before the window, replayed and not "
                    "measured (Table 5.4's segments take 120; 0, the default: the window starts "
                    "cold, every service at one replica)")
    ap.add_argument("--policy", default="rule_v2", choices=["rule_v2", "ppo"])
    ap.add_argument("--models", type=Path, default=ROOT / "models")
    ap.add_argument("--traces", type=traces_folder, default=PACKAGE,
                    help="trace folder with train/, val/, test/ (default: the paper's, shipped with testbed)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "time-scale")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--from-json", type=Path, help="only print the figures of an earlier run")
    args = ap.parse_args()
    if args.from_json:
        return 0 if show(json.loads(args.from_json.read_text())) else 1
    hh, mm = (int(x) for x in args.start.split(":"))
    args.start_s = hh * 3600 + mm * 60
    runs = []
    for scale in (float(x) for x in args.scales.split(",")):
        print(f"time scale {scale:g}: {args.window:g} s of the test day from {args.start}, after "
              f"{args.warmup:g} s of warm-up ({(args.window + args.warmup) / scale:.0f} s of wall "
              "time)", flush=True)
        runs.append(run_one(scale, args))
        if args.json:
            args.json.write_text(json.dumps(runs, indent=1))
    return 0 if show(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
