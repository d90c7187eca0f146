"""Simulator speed: steps/s per service alone on the test day, at the paper's ratios and 8x them,
and, with --reference DIR, against the dissertation's published SimPy simulator in the same run.

Usage: python3 bench/sim_speed.py [--traces DIR] [--steps N] [--reference DIR] [--repeat N] [--shared]
Each step is one 30 s period plus one decision of the named policy through ScalerLoop.
--reference DIR: a checkout of github.com/tu-nv/drafas (needs `pip install simpy`). Both
simulators then run rule-based v2 for each service alone on 8 units (--shared: also the three
sharing them; one step = every service advances 30 s and decides) at Table 5.1's and 5.2's
ratios over the same steps of the test day. Each of --repeat repetitions measures ours and then
theirs back to back, so both see the same machine load, and takes the ratio of the two; it prints
the min and median of those ratios, on wall-clock and on CPU time. Floor (issue 27): ours >= 100x
theirs per step on every service. Every ratio it prints is of two runs measured here, now;
without --reference it prints our steps/s alone and says that the published simulator was not run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from testbed.profiles.paper import DEFAULT_RATIOS, TABLE_5_1, TABLE_5_2
from testbed.scaler.policies import RandomPolicy, RuleV2, StaticPolicy
from testbed.sim.passes import COMPILED_ENV, compiled_kernels
from testbed.traces import PACKAGE, traces_folder
from testbed.train.evaluate import EvalRun, evaluate, test_day_traces

FLOOR = 100.0  # issue 27: ours >= 100x the published simulator per step, on every service
# per-step speed is that of long work, where the default install takes the compiled passes (after
# COMPILED_AFTER_S of simulated time); the bench's few days take them from the start
os.environ.setdefault(COMPILED_ENV, "1")
NOT_RUN = ("speed ratio: none; the published simulator was not run "
           "(--reference DIR runs it beside ours and prints the ratio of the two)")


def passes() -> str:
    """Which of the simulator's two paths ours runs on (the figures are equal to the bit)."""
    if compiled_kernels() is not None:
        import numba

        return (f"ours: the compiled passes (numba {numba.__version__}; {COMPILED_ENV}=0 runs the "
                "numpy ones)")
    return "ours: the numpy passes (numba not installed, or " + COMPILED_ENV + "=0)"


def alone(traces, steps: int) -> None:
    print(f"{'service':8} {'load':>4} {'policy':8} {'steps/s':>9} {'SLO viol':>8} {'inst':>6}")
    for load in (1, 8):
        for service in traces:
            for policy in (RuleV2.for_service(service), StaticPolicy(), RandomPolicy(0)):
                best = None
                for _ in range(3):
                    r = evaluate(
                        {service: policy},
                        {service: traces[service]},
                        {service: DEFAULT_RATIOS[service] * load},
                        run=EvalRun(max_steps=steps),
                    )[service]
                    best = r if best is None or r.steps_per_second > best.steps_per_second else best
                print(
                    f"{service:8} {load:>3}x {policy.name:8} {best.steps_per_second:9,.0f} "
                    f"{best.slo_violation_rate:8.4f} {best.instances:6.2f}",
                    flush=True,
                )


def _ours(policies, traces, ratios, steps: int, runs: int = 5) -> tuple[float, float]:
    """Median steps/s (wall, CPU) of `runs` back-to-back runs: one run of ours is ~0.1 s, short
    enough that a single scheduler hiccup on a shared machine would decide it."""
    wall, cpu = [], []
    for _ in range(runs):
        r = next(iter(evaluate(policies, traces, ratios, run=EvalRun(max_steps=steps)).values()))
        wall.append(r.steps_per_second)
        cpu.append(r.steps_per_cpu_second)
    return statistics.median(wall), statistics.median(cpu)


def _pair(traces_dir: str, ref_dir: str, traces, ratios, services, steps: int):
    """One measurement of both simulators, back to back: (ours wall, ours CPU, theirs wall, theirs CPU)."""
    from drafas_reference import run_reference

    policies = {s: RuleV2.for_service(s) for s in services}
    ours, ours_cpu = _ours(policies, {s: traces[s] for s in services}, ratios, steps)
    _, theirs, theirs_cpu = run_reference(ref_dir, traces_dir, ratios, total_units=8, steps=steps,
                                          services=tuple(services), with_cpu=True)
    return ours, ours_cpu, theirs, theirs_cpu


def against_reference(traces_dir: str, ref_dir: str, steps: int, repeat: int, shared: bool) -> float:
    """Per service alone on 8 units (and, with `shared`, the three together), at Table 5.1's and
    5.2's ratios: each repetition measures both simulators back to back and takes their ratio;
    prints the min and median of those ratios. Returns the worst median CPU ratio."""
    traces = test_day_traces(traces_dir)
    setups = [(s,) for s in traces] + ([tuple(traces)] if shared else [])
    print(f"\nboth simulators, rule v2 on 8 units, {steps} steps, {repeat} repetitions "
          "(ratios of the two measured back to back; ours: median of 5 runs)")
    print(passes())
    print(f"{'ratios':9} {'service':8} {'ours steps/s':>12} {'published':>9} "
          f"{'wall ratio min/med':>19} {'CPU ratio min/med':>18}")
    worst: dict[str, float] = {}
    for table in (TABLE_5_1, TABLE_5_2):
        for services in setups:
            runs = [_pair(traces_dir, ref_dir, traces, table.ratios, services, steps) for _ in range(repeat)]
            wall = [o / t for o, _, t, _ in runs]
            cpu = [o / t for _, o, _, t in runs]
            name = services[0] if len(services) == 1 else "all"
            worst[name] = min(worst.get(name, float("inf")), statistics.median(cpu))
            print(f"{table.name:9} {name:8} {statistics.median(r[1] for r in runs):12,.0f} "
                  f"{statistics.median(r[3] for r in runs):9,.1f} "
                  f"{min(wall):8.1f}x {statistics.median(wall):7.1f}x "
                  f"{min(cpu):8.1f}x {statistics.median(cpu):7.1f}x", flush=True)
    load = os.getloadavg()[0]
    figures = ", ".join(f"{s} {r:.1f}x" for s, r in worst.items())
    print(f"per-step speed ratio per service (CPU time, median, worse of the two ratios): {figures} "
          f"(floor {FLOOR:.0f}x); load average {load:.1f}")
    return min(worst.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=traces_folder, default=PACKAGE,
                    help="trace folder with train/, val/, test/ (default: the paper's, shipped with testbed)")
    ap.add_argument("--steps", type=int, default=2880)
    ap.add_argument("--reference", help="checkout of github.com/tu-nv/drafas: compare with it")
    ap.add_argument("--repeat", type=int, default=3, help="measurements of each setup with --reference")
    ap.add_argument("--shared", action="store_true",
                    help="with --reference: also the three services sharing the 8 units")
    args = ap.parse_args()
    if args.reference:
        against_reference(args.traces, args.reference, args.steps, args.repeat, args.shared)
        return
    traces = test_day_traces(args.traces)
    print(passes())
    alone(traces, args.steps)
    all_policies = {s: RuleV2.for_service(s) for s in traces}
    r = evaluate(all_policies, traces, DEFAULT_RATIOS, run=EvalRun(max_steps=args.steps))
    print(
        f"all three sharing 8 units, rule_v2: {next(iter(r.values())).steps_per_second:,.0f} steps/s "
        "(each step advances and decides for three services)"
    )
    print(NOT_RUN)


if __name__ == "__main__":
    main()
