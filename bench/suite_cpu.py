#!/usr/bin/env python3
"""What the README's test command costs in CPU, test by test, and what that predicts for its
time beside a busy process (prints figures; not a test).

Runs `python3 -m pytest -q -n 3` (or the pytest arguments given after `--`) with a recorder
(bench/pytest_plugins/suite_cpu_recorder.py) loaded in every worker: per test it records the
worker's CPU seconds and those of the children it waited for (getrusage; a daemon nobody waits
for is left out), and its wall time. It reads the host's /proc/stat over the run (busy
core-seconds, steal) and, with `--busy N`, starts N processes spinning at the harness's priority
beside it, as a user's other work.

Then per group of tests (the serial testbed scenarios, the tests beside them, the simulator's
scenario files, the rest) their CPU and wall time, the tests that cost most, and the suite's CPU
over the cores it had: on two cores the suite's time is about its CPU divided by the cores it
got (docs/pace.md, "2026-12-07: what the suite's time is made of").

    python3 bench/suite_cpu.py                     # the whole suite, quiet
    python3 bench/suite_cpu.py --busy 1            # beside one busy process
    python3 bench/suite_cpu.py -- tests/cli -n 3   # a part
    python3 bench/suite_cpu.py --from runs/suite-cpu   # the figures of an earlier run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from testbed.metrics.host import cpu_ticks  # noqa: E402
from testbed.pytest_plugin import BESIDE_GROUP, TESTBED_GROUP  # noqa: E402

PLUGINS = ROOT / "bench" / "pytest_plugins"  # the recorder, alone on the workers' PYTHONPATH
sys.path.insert(0, str(PLUGINS))
from suite_cpu_recorder import OUT_ENV  # noqa: E402 (where each worker appends its rows)

TICK = os.sysconf("SC_CLK_TCK")


def group(nodeid: str) -> str:
    """Which of the suite's groups a test is in, from the xdist group its node id carries."""
    tail = nodeid.rsplit("@", 1)[-1] if nodeid.rfind("@") > nodeid.rfind("]") else ""
    if tail == TESTBED_GROUP:
        return "testbed scenarios (serial)"
    if tail == BESIDE_GROUP:
        return "beside the scenarios"
    return "simulator scenario files" if tail.startswith("sim:") else "the other tests"


def run(out: Path, busy: int, pytest_args: list[str]) -> dict:
    """The suite with the recorder, beside `busy` spinners; the run's figures (also out/run.json)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rows-*.jsonl"):
        old.unlink()
    env = dict(os.environ, **{OUT_ENV: str(out)},
               PYTHONPATH=os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])))
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    ticks0, t0 = cpu_ticks(), time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "suite_cpu_recorder", *pytest_args],
                              cwd=ROOT, env=env)
    finally:
        for s in spinners:
            s.kill()
            s.wait()
    ticks1, wall = cpu_ticks(), time.monotonic() - t0
    total = (ticks1[0] - ticks0[0]) or 1
    figures = {"pytest_args": pytest_args, "busy": busy, "exit": proc.returncode, "wall_s": wall,
               "host_busy_core_s": (total - (ticks1[1] - ticks0[1])) / TICK,
               "steal_share": (ticks1[2] - ticks0[2]) / total, "cores": os.cpu_count()}
    (out / "run.json").write_text(json.dumps(figures, indent=1))
    return figures


def report(out: Path, top: int) -> None:
    """Print the figures of the run recorded in `out`."""
    figures = json.loads((out / "run.json").read_text())
    rows = [json.loads(line) for f in sorted(out.glob("rows-*.jsonl")) for line in f.open()]
    cpu = {r["id"]: r["own_s"] + r["children_s"] for r in rows}
    total_cpu = sum(cpu.values())
    wall = figures["wall_s"]
    print(f"pytest {' '.join(figures['pytest_args'])}: exit {figures['exit']}, {len(rows)} tests, "
          f"{wall:.0f} s, beside {figures['busy']} busy process(es), steal "
          f"{100 * figures['steal_share']:.1f} %")
    print(f"the tests' CPU (own + waited children): {total_cpu:.0f} s; the host's busy "
          f"core-seconds: {figures['host_busy_core_s']:.0f} of {wall * figures['cores']:.0f}")
    print(f"cores the tests had on average: {total_cpu / wall:.2f} "
          f"(their CPU over the suite's time)")
    by: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        g = by[group(r["id"])]
        g[0] += cpu[r["id"]]
        g[1] += r["wall_s"]
        g[2] += 1
    print(f"\n{'group':30} {'tests':>6} {'CPU s':>8} {'wall s':>8}")
    for name, (c, w, n) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        print(f"{name:30} {n:6d} {c:8.0f} {w:8.0f}")
    workers: dict[str, float] = defaultdict(float)
    for r in rows:
        workers[r["worker"]] += r["wall_s"]
    print("\nper worker, the sum of its tests' wall time: "
          + ", ".join(f"{k} {v:.0f} s" for k, v in sorted(workers.items())))
    print(f"\nthe {top} tests that cost most CPU (s: CPU, own part, wall)")
    for r in sorted(rows, key=lambda r: -cpu[r["id"]])[:top]:
        print(f"{cpu[r['id']]:7.1f} {r['own_s']:6.1f} {r['wall_s']:7.1f}  {r['id'][:120]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=0, help="processes spinning beside the suite")
    ap.add_argument("--out", type=Path, default=None, help="where the rows go (default: a temporary folder)")
    ap.add_argument("--from", dest="earlier", type=Path, help="print the figures of an earlier run's --out")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (default: -q -n 3)")
    args = ap.parse_args()
    if args.earlier is not None:
        report(args.earlier, args.top)
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="suite-cpu-"))
    figures = run(out, args.busy, args.pytest_args or ["-q", "-n", "3"])
    report(out, args.top)
    print(f"\nrows: {out}")
    return figures["exit"]


if __name__ == "__main__":
    sys.exit(main())
