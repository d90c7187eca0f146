"""CLI start-up time: `testbed --help`, `testbed status` and `testbed down` as whole processes
(interpreter start, imports, argument parsing, the command itself) beside `python3 -c pass`, the
floor no Python command goes below. Each round runs every command once, in turn, so a change in
the machine's load falls on all of them alike; the figures are wall time (min and median over the
rounds) and the process's CPU time (user + system, median), which a busy machine stretches less
than wall time.

`status` and `down` run against an empty state directory (TESTBED_STATE_DIR), so they measure
the path where nothing is up and can never touch a testbed someone else brought up. As root they
get as far as "no testbed is up"; without root they stop at the root check.

    python3 bench/startup.py [--runs 10]

Each line also gives the command as a multiple of `python3 -c pass` (the same interpreter,
sys.executable): wall minimum over wall minimum, and CPU median over CPU median (what a busy
machine stretches least). `python3 -m testbed` runs this checkout's code; the installed
`testbed` script, when it is on PATH, runs whatever checkout the package was installed from
(editable installs point at one).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = (["--help"], ["status"], ["down"])
GOAL = 8.0  # --help and status, as a multiple of `python3 -c pass` on the same interpreter


def time_process(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of `argv`, output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="runs per command (default 10)")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error(f"--runs must be at least 1, got {args.runs}")
    with tempfile.TemporaryDirectory(prefix="tb-startup-state-") as state:
        env = dict(os.environ, TESTBED_STATE_DIR=state)
        cases = [("python3 -c pass", [sys.executable, "-c", "pass"])]
        cases += [(f"python3 -m testbed {a[0]}", [sys.executable, "-m", "testbed", *a]) for a in COMMANDS]
        script = shutil.which("testbed")
        broken = script is not None and subprocess.run(
            [script, "--help"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            check=False).returncode != 0
        if script is not None and not broken:
            cases += [(f"testbed {a[0]} (installed script)", [script, *a]) for a in COMMANDS]
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
              f"({os.cpu_count()} CPUs), {args.runs} runs each")
        walls: dict[str, list[float]] = {label: [] for label, _ in cases}
        cpus: dict[str, list[float]] = {label: [] for label, _ in cases}
        for _ in range(args.runs):
            for label, argv in cases:
                wall, cpu = time_process(argv, env)
                walls[label].append(wall)
                cpus[label].append(cpu)
        floor = "python3 -c pass"
        print(f"{'command':<36} {'wall min ms':>11} {'median ms':>9} {'CPU median ms':>13} "
              f"{'x pass (wall min, CPU)':>23}")
        for label, _ in cases:
            ratio = (f"{min(walls[label]) / min(walls[floor]):.1f}x, "
                     f"{statistics.median(cpus[label]) / statistics.median(cpus[floor]):.1f}x")
            print(f"{label:<36} {min(walls[label]) * 1000:>11.0f} "
                  f"{statistics.median(walls[label]) * 1000:>9.0f} "
                  f"{statistics.median(cpus[label]) * 1000:>13.0f} {ratio:>23}")
        print(f"the goal (issue 45): --help and status within {GOAL:g}x of the same interpreter's "
              "`python3 -c pass`")
        if script is None:
            print("(no `testbed` script on PATH: only `python3 -m testbed` measured)")
        elif broken:
            # timing a script that dies on import would print an import error's speed
            print(f"(the `testbed` script on PATH, {script}, fails `--help` (an install of another "
                  "checkout?): only `python3 -m testbed` measured)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
