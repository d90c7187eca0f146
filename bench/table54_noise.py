#!/usr/bin/env python3
"""Table 5.4's run-to-run noise on the local testbed, and the window it takes to tell DRL from rule
v2 (prints figures; not a test). Needs root; the DRL side needs models/ (else --rule-only).

Runs `testbed reproduce table5.4` with REPS repetitions of a WINDOW-second slice of the test day
(from 09:00), then per service and policy: mean and standard deviation over the repetitions of
reward, SLO violation rate, instances and processing time, the difference to the paper, and the
window needed for the paper's DRL-rule reward difference to exceed two standard deviations of
the difference of two runs, assuming the noise falls as 1/sqrt(window):
    needed = WINDOW * (2 * sqrt(2) * sd / |paper difference|) ** 2

    python3 bench/table54_noise.py [--window 300] [--reps 3] [--rule-only] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.profiles.paper import TABLE_5_4  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=300.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rule-only", action="store_true")
    ap.add_argument("--models", type=Path, default=ROOT / "models")
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--from-report", type=Path, help="only print figures of an earlier run")
    args = ap.parse_args()

    if args.from_report:
        out = args.from_report
    else:
        from testbed.reproduce.artefacts import select
        from testbed.reproduce.run import Options, reproduce

        print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        result = reproduce(select(["table5.4"]), Options(
            out=args.out, traces_dir=args.traces, models_dir=args.models,
            rule_only=args.rule_only, t54_duration_s=args.window, t54_repetitions=args.reps,
            show_runs=False))
        out = result.out
        print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    data = json.loads((out / "verdicts.json").read_text())
    table = data["verdicts"][0]["table"]
    print(f"\n{table['title']}  (report: {out / 'report.html'})")
    print(f"{'service':8s} {'policy':8s} {'metric':18s} {'ours':>8s} {'sd':>8s} {'paper':>8s} "
          f"{'diff':>8s}")
    for c in table["cells"]:
        for m in ("slo_violation_rate", "instances", "proc_time_s", "reward"):
            ours, sd, paper = c["ours"].get(m), c["sd"].get(m), c["paper"].get(m)
            print(f"{c['service']:8s} {c['policy']:8s} {m:18s} {_f(ours)} {_f(sd)} {_f(paper)} "
                  f"{_f(None if ours is None else ours - paper)}")
    window = float(table["title"].split(",")[1].split()[0]) if "," in table["title"] else None
    print("\nwindow needed for the paper's DRL - rule v2 reward difference to exceed 2 sd of a "
          "two-run difference (noise ~ 1/sqrt(window)):")
    for s, by in TABLE_5_4.items():
        gap = abs(by["ppo"]["reward"] - by["rule_v2"]["reward"])
        sds = [c["sd"].get("reward") for c in table["cells"] if c["service"] == s
               and c["sd"].get("reward") is not None]
        if not sds or window is None:
            print(f"  {s}: no repeated runs")
            continue
        sd = max(sds)
        need = window * (2 * math.sqrt(2) * sd / gap) ** 2
        print(f"  {s}: paper gap {gap:.4f}, sd at {window:g} s {sd:.4f} -> about {need / 60:.0f} "
              f"min ({need / 3600:.1f} h) per policy")
    return 0


def _f(v: float | None) -> str:
    return f"{'–':>8s}" if v is None else f"{v:8.4f}"


if __name__ == "__main__":
    raise SystemExit(main())
