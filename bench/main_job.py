"""The main job run N times: how often a healthy run is not a PASS, and whether doctored copies of
each run's results are caught by `testbed judge` (issue 34).

Each run is `testbed run scenarios/slicing-ci.yaml` as the README's first command runs it. Then
each run's results.json is copied with one thing changed (the cases in DOCTORED: an effect the
dissertation shows taken away, a difference it denies put in) and judged again with `testbed
judge COPY --scenario SCENARIO`; every copy must exit non-zero. Printed: the runs' exit codes (0
PASS, 1 FAIL, 2 UNDECIDED), each check's verdicts over the runs, and each doctored case's exits.

    python3 bench/main_job.py --runs 10 --out runs/main-job-bench
    python3 bench/main_job.py --judge-only runs/main-job-bench/2026*   # doctor runs already made
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "slicing-ci.yaml"
console = Console()

Rows = list[dict]


def _cell(rows: Rows, service: str, on: bool) -> dict:
    """The service row of `service`'s cell with the slice on or off."""
    [row] = [r for r in rows if r.get("service") == service and "requests" in r
             and r.get("slicing") in ((True, "on") if on else (False, "off"))]
    return row


def _late(row: dict, violations: int) -> None:
    row["violations"] = violations
    row["slo_violation_rate"] = violations / row["requests"]


def _slower(service: str, factor: float) -> Callable[[Rows], None]:
    def doctor(rows: Rows) -> None:
        on = _cell(rows, service, True)
        _cell(rows, service, False)["mean_latency_ms"] = factor * on["mean_latency_ms"]
    return doctor


def _no_imgcls_effect(rows: Rows) -> None:
    off, on = _cell(rows, "imgcls", False), _cell(rows, "imgcls", True)
    off["mean_latency_ms"] = 1.1 * on["mean_latency_ms"]
    off["latency_sd_ms"] = 200.0
    _late(off, 3)


def _slice_hurts_imgcls(rows: Rows) -> None:
    _late(_cell(rows, "imgcls", False), 0)
    _late(_cell(rows, "imgcls", True), 4)


def _sliced_imgcls_late(rows: Rows) -> None:
    on = _cell(rows, "imgcls", True)
    _late(on, math.ceil(0.02 * on["requests"]))


def _more_late(service: str, on: bool, points: float) -> Callable[[Rows], None]:
    def doctor(rows: Rows) -> None:
        row = _cell(rows, service, on)
        _late(row, row["violations"] + math.ceil(points * row["requests"]))
    return doctor


DOCTORED: dict[str, Callable[[Rows], None]] = {
    "imgcls only 1.1x slower without the slice (sd 200 ms, 3 late)": _no_imgcls_effect,
    "no imgcls effect at all (off = on)": _slower("imgcls", 1.0),
    "the slice makes imgcls's SLO worse (4 late vs 0)": _slice_hurts_imgcls,
    "sliced imgcls 2 % late (bound 1 %)": _sliced_imgcls_late,
    "TTS 37 % slower without the slice": _slower("tts", 1.37),
    "chatbot 16 % slower without the slice": _slower("chatbot", 1.16),
    "TTS 5 points more late without the slice": _more_late("tts", False, 0.05),
    "chatbot 5 points more late with the slice": _more_late("chatbot", True, 0.05),
}


def _testbed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True,
                          check=False)


def run_main_job(out: Path, scenario: Path) -> tuple[int, Path, float]:
    """One run of the main job: its exit code, run directory and wall time."""
    before = set(out.glob("*")) if out.exists() else set()
    t0 = time.monotonic()
    done = _testbed("run", str(scenario), "--out", str(out))
    wall = time.monotonic() - t0
    new = sorted(set(out.glob("*")) - before)
    if not new:
        raise SystemExit(f"the run left no run directory in {out}:\n{done.stdout}\n{done.stderr}")
    return done.returncode, new[-1], wall


def judge_doctored(run_dir: Path, scenario: Path) -> dict[str, int]:
    """Each DOCTORED copy of the run's results, judged again: the exit code of each."""
    record = json.loads((run_dir / "results.json").read_text())
    exits = {}
    for case, doctor in DOCTORED.items():
        rows = copy.deepcopy(record["rows"])
        doctor(rows)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "results.json").write_text(json.dumps({**record, "rows": rows}))
            exits[case] = _testbed("judge", tmp, "--scenario", str(scenario)).returncode
    return exits


def verdicts(run_dir: Path, scenario: Path) -> dict[str, str]:
    """The run's checks judged as `testbed judge` does, check text -> verdict."""
    from testbed.judge.outcome import evaluate_all
    from testbed.scenario.load import load_scenario

    rows = json.loads((run_dir / "results.json").read_text())["rows"]
    return {o.text: o.verdict for o in evaluate_all(list(load_scenario(scenario).scenario.expect), rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "main-job-bench")
    ap.add_argument("--scenario", type=Path, default=SCENARIO)
    ap.add_argument("--judge-only", type=Path, nargs="*", help="run directories made before: "
                    "judge and doctor them instead of running")
    args = ap.parse_args()
    runs: list[tuple[int | None, Path, float | None]] = []
    if args.judge_only:
        runs = [(None, d, None) for d in args.judge_only]
    else:
        for i in range(args.runs):
            console.print(f"[bold]run {i + 1} of {args.runs}[/] ({args.scenario.name})")
            code, run_dir, wall = run_main_job(args.out, args.scenario)
            console.print(f"  exit {code} in {wall:.0f} s: {run_dir}")
            runs.append((code, run_dir, wall))
    per_check: dict[str, Counter[str]] = {}
    caught: dict[str, Counter[int]] = {case: Counter() for case in DOCTORED}
    exits: Counter[str] = Counter()
    for code, run_dir, _ in runs:
        v = verdicts(run_dir, args.scenario)
        for text, verdict in v.items():
            per_check.setdefault(text, Counter())[verdict] += 1
        exits[str(code) if code is not None else
              {"FAIL": "1", "UNDECIDED": "2"}.get(next((x for x in ("FAIL", "UNDECIDED")
                                                        if x in v.values()), ""), "0")] += 1
        for case, rc in judge_doctored(run_dir, args.scenario).items():
            caught[case][rc] += 1
    n = len(runs)
    walls = [w for _, _, w in runs if w is not None]
    console.print(f"\n{n} runs of {args.scenario.name}"
                  + (f", {min(walls):.0f}-{max(walls):.0f} s each" if walls else "")
                  + f": exit 0 (PASS) {exits['0']}, 1 (FAIL) {exits['1']}, 2 (UNDECIDED) {exits['2']}"
                  + f"; other {n - exits['0'] - exits['1'] - exits['2']}")
    table = Table("check", "PASS", "FAIL", "UNDECIDED", title="Each check over the runs")
    for text, c in per_check.items():
        table.add_row(escape(text), str(c["PASS"]), str(c["FAIL"]), str(c["UNDECIDED"]))
    console.print(table)
    table = Table("doctored copy", "exit 0 (missed)", "exit 1", "exit 2",
                  title="Doctored copies judged again (testbed judge --scenario)")
    for case, c in caught.items():
        table.add_row(case, str(c[0]), str(c[1]), str(c[2]))
    console.print(table)
    missed = sum(c[0] for c in caught.values())
    console.print(f"false FAIL: {exits['1']} of {n}; not decided: {exits['2']} of {n}; "
                  f"doctored copies passed: {missed} of {n * len(DOCTORED)}")


if __name__ == "__main__":
    main()
