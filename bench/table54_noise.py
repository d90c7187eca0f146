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
from testbed.traces import PACKAGE, traces_folder  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=300.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rule-only", action="store_true")
    ap.add_argument("--models", type=Path, default=ROOT / "models")
    ap.add_argument("--traces", type=traces_folder, default=PACKAGE,
                    help="trace folder with train/, val/, test/ (default: the paper's, shipped with testbed)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--from-report", type=Path, help="only print figures of an earlier run")
    ap.add_argument("--sim-gaps", action="store_true",
                    help="instead: DRL minus rule v2 through the simulator (as the testbed runs "
                         "it, 3 seeds) on 20-minute windows every 30 min of the test day: where "
                         "a testbed window can tell the two apart")
    ap.add_argument("--sim-windows", action="store_true",
                    help="instead: rule v2 through the simulator (as the testbed runs it) on "
                         "windows of 5 min to 24 h from 09:00, 3 seeds: how far a window's "
                         "reward is from the whole day's")
    args = ap.parse_args()
    if args.sim_windows:
        return sim_windows(args.traces)
    if args.sim_gaps:
        return sim_gaps(args.traces, args.models)

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


def _window_scenario(base: dict, start_s: int, seconds: int, policy: str, models: Path):
    import yaml

    from testbed.scenario.load import parse_scenario

    path = ROOT / "scenarios" / "slo-testbed.yaml"
    doc = dict(base, duration_s=seconds)
    doc["services"] = [
        {k: v for k, v in x.items() if k != "model"} | (
            {"policy": "ppo", "model": str((models / f"{x['name']}.zip").resolve())}
            if policy == "ppo" else {"policy": policy})
        for x in base["services"]]
    doc["clients"] = [dict(c, start_s=start_s) for c in base["clients"]]
    return parse_scenario(yaml.safe_dump(doc), str(path), path.parent).scenario


def sim_gaps(traces: Path, models: Path, minutes: int = 20) -> int:
    import statistics

    from testbed.config.yamlfile import load_yaml_file
    from testbed.scenario.simcell import run_sim_cell

    path = ROOT / "scenarios" / "slo-testbed.yaml"
    base = dict(load_yaml_file(path).data)
    base["traces_dir"] = str(traces.resolve())
    base.update(matrix={}, expect=[], markers=[])
    print(f"DRL - rule v2 reward through the simulator as the testbed runs it, {minutes}-minute "
          "windows, mean of 3 seeds (0: both policies hold the same replicas)")
    print(f"{'from':>5s} " + " ".join(f"{s:>24s}" for s in ("chatbot", "imgcls", "tts")))
    for half_hours in range(48):
        start = half_hours * 1800
        means = {}
        for policy in ("ppo", "rule_v2"):
            scn = _window_scenario(base, start, minutes * 60, policy, models)
            per: dict[str, list[float]] = {}
            for seed in (0, 1, 2):
                for svc, r in run_sim_cell(scn, path.parent, seed=seed, like_testbed=True).items():
                    per.setdefault(svc, []).append(r["reward"])
            means[policy] = {k: statistics.fmean(v) for k, v in per.items()}
        cols = [f"{means['rule_v2'][s]:8.4f} {means['ppo'][s] - means['rule_v2'][s]:+8.4f}"
                for s in ("chatbot", "imgcls", "tts")]
        print(f"{start // 3600:02d}:{start % 3600 // 60:02d} " + " ".join(f"{c:>24s}" for c in cols),
              flush=True)
    return 0


def sim_windows(traces: Path) -> int:
    import statistics

    import yaml

    from testbed.config.yamlfile import load_yaml_file
    from testbed.scenario.load import parse_scenario
    from testbed.scenario.simcell import run_sim_cell

    path = ROOT / "scenarios" / "slo-testbed.yaml"
    base = dict(load_yaml_file(path).data)
    base["services"] = [{k: v for k, v in x.items() if k != "model"} | {"policy": "rule_v2"}
                        for x in base["services"]]
    base["traces_dir"] = str(traces.resolve())
    base.update(matrix={}, expect=[], markers=[])
    rows = []
    for start_h, minutes in [(9, 5), (9, 15), (9, 30), (9, 60), (9, 120), (9, 240), (9, 480),
                             (15, 30), (21, 30), (0, 1440)]:
        doc = dict(base, duration_s=minutes * 60)
        doc["clients"] = [dict(c, start_s=start_h * 3600) for c in base["clients"]]
        scn = parse_scenario(yaml.safe_dump(doc), str(path), path.parent).scenario
        per = {}
        for seed in (0, 1, 2):
            for svc, r in run_sim_cell(scn, path.parent, seed=seed, like_testbed=True).items():
                per.setdefault(svc, []).append(r["reward"])
        rows.append((start_h, minutes, {k: (statistics.fmean(v), statistics.stdev(v))
                                        for k, v in per.items()}))
    day = rows[-1][2]
    print("rule v2 through the simulator as the testbed runs it (carry rounding, ready-only "
          "utilization), 3 seeds: reward mean (sd) and its distance to the whole day's")
    print(f"{'from':>5s} {'minutes':>7s} " + " ".join(f"{s:>26s}" for s in day))
    for start_h, minutes, per in rows:
        cols = [f"{m:8.4f} ({sd:.4f}) {m - day[s][0]:+8.4f}" for s, (m, sd) in per.items()]
        print(f"{start_h:4d}h {minutes:7d} " + " ".join(f"{c:>26s}" for c in cols))
    return 0


def _f(v: float | None) -> str:
    return f"{'–':>8s}" if v is None else f"{v:8.4f}"


if __name__ == "__main__":
    raise SystemExit(main())
