"""Fig 5.7's SLO tail from run to run: imgcls without the slice at 20 and 40 flows, N repetitions
of slicing-ci's cell (its link, rates and cell length), beside the values behind the figure.

    python3 bench/tail_spread.py --runs 10 --plot docs/slicing-tail-spread.png
    python3 bench/tail_spread.py --runs 10 --flows 20       # 20 flows only
    python3 bench/tail_spread.py --from RUN_DIR [RUN_DIR ...]   # summarise runs made before
                                                            # (main-job runs hold the 40-flow cell)

The scenario is slicing-ci.yaml with its matrix narrowed to imgcls, slice off, 20 and 40 flows,
and `repetitions: N`; pass --link KEY=VALUE to try another bottleneck (e.g.
flow_queue_perturb_s=null for the fixed hash).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "slicing-ci.yaml"
FLOWS = (20, 40)


def scenario_text(runs: int, link: dict[str, object], flows: list[int]) -> str:
    doc = yaml.safe_load(SCENARIO.read_text())
    doc["name"] = "tail-spread"
    doc["service_profiles"] = str((SCENARIO.parent / doc["service_profiles"]).resolve())
    doc["testbed"]["link"].update(link)
    doc["matrix"] = {"service": ["imgcls"], "iperf_flows": flows, "slicing": [False]}
    doc["repetitions"] = runs
    doc["expect"] = []
    doc.pop("plan", None)
    return yaml.safe_dump(doc, sort_keys=False)


def rates(run_dirs: list[Path]) -> dict[int, list[float]]:
    """Each flow count's SLO violation rates (one per cell and repetition) of the runs."""
    out: dict[int, list[float]] = {f: [] for f in FLOWS}
    for d in run_dirs:
        for row in json.loads((d / "results.json").read_text())["rows"]:
            if (row.get("service") == "imgcls" and "requests" in row and row["iperf_flows"] in out
                    and row.get("slicing") in (False, "off")):
                out[row["iperf_flows"]].append(row["slo_violation_rate"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "tail-spread")
    ap.add_argument("--from", dest="existing", type=Path, nargs="*")
    ap.add_argument("--link", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--flows", type=int, nargs="+", default=list(FLOWS),
                    help="the flow counts to run (the main job's runs hold 40: --from them)")
    ap.add_argument("--plot", type=Path)
    args = ap.parse_args()
    from testbed.profiles.paper import FIG_5_7_5_8_VALUES

    [series] = [s for s in FIG_5_7_5_8_VALUES
                if s.service == "imgcls" and s.metric == "slo_violation_rate"]
    run_dirs = args.existing or []
    if not run_dirs:
        link = {k: yaml.safe_load(v) for k, v in (x.split("=", 1) for x in args.link)}
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "tail-spread.yaml"
            path.write_text(scenario_text(args.runs, link, args.flows))
            before = set(args.out.glob("*")) if args.out.exists() else set()
            subprocess.run([sys.executable, "-m", "testbed", "run", str(path), "--out",
                            str(args.out)], check=False)
            run_dirs = sorted(set(args.out.glob("*")) - before)
    by_flows = rates(run_dirs)
    print("imgcls SLO violations without the slice, cells per flow count: "
          + ", ".join(f"{f}: {len(v)}" for f, v in by_flows.items()))
    print("flows  figure   mean    sd     min    max    values (%)")
    for f, vals in by_flows.items():
        if not vals:
            continue
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        print(f"{f:5d}  {100 * series.value(False, f):5.2f}  {100 * statistics.mean(vals):5.2f}  "
              f"{100 * sd:5.2f}  {100 * min(vals):5.2f}  {100 * max(vals):5.2f}   "
              + " ".join(f"{100 * v:.2f}" for v in vals))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.2))
        for i, (f, vals) in enumerate(by_flows.items()):
            ax.scatter([i] * len(vals), [100 * v for v in vals], alpha=0.6, label="runs" if i == 0 else None)
            fig_value = 100 * series.value(False, f)
            ax.hlines(fig_value, i - 0.3, i + 0.3, colors="k", label="figure" if i == 0 else None)
            ax.hlines([fig_value / 2, fig_value * 2], i - 0.2, i + 0.2, colors="k", linestyles=":",
                      label="factor 2" if i == 0 else None)
        ax.set_xticks(range(len(by_flows)), [f"{f} flows" for f in by_flows])
        ax.set_ylabel("imgcls late without the slice (%)")
        ax.set_title("Fig 5.7's tail, run to run ("
                     + ", ".join(f"{len(v)} at {f}" for f, v in by_flows.items()) + ")")
        ax.legend(fontsize=8, loc="upper left")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
