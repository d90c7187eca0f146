#!/usr/bin/env python3
"""Every timed test, and each check of ppo-testbed-ci, still fails on a real regression while a
CPU-bound process runs beside it (prints figures; not a test). Needs root for the scenario files.

Each case plants one regression (bench/plants/sitecustomize.py: a client loop that stalls, a
replica that wakes early or late or spends 4 ms of CPU per request, a balancer that waits before
it forwards; and, not timing, a PPO agent that never acts or releases all the mask allows) into
every Python process of a pytest run of the tests it should break, with
`python3 -c "while True: pass"` beside it and CI's `--machine-behind fail`. A planted test that
passes is a test that lost its power to fail: the script then exits 1. `--control` runs the
same tests without the plant (they must pass beside the same busy process).

    python3 bench/planted_regressions.py [--only client-stall,replica-cpu] [--control] [--no-busy]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
PLANTS_DIR = ROOT / "bench" / "plants"

CLIENT = "tests/load/test_client.py::"
REPLICA = "tests/cluster/test_local_replica.py::"
CASES: dict[str, list[str]] = {  # plant -> the timed tests it must break
    "client-stall": [
        CLIENT + "test_sending_keeps_pace_while_a_burst_of_answers_is_handled",
        CLIENT + "test_a_wait_for_a_connection_is_not_the_clients_lag",
        CLIENT + "test_clients_given_one_start_at_keep_one_schedule_and_a_late_one_records_its_lateness",
        "tests/scenario/test_pace.py::test_the_probe_holds_a_light_load_and_not_one_beyond_what_a_process_sends",
        "scenarios/smoke.yaml",
        "scenarios/policies-ci.yaml",
    ],
    "replica-wakes-late": [REPLICA + "test_processing_times_keep_the_profiles_mean_at_a_time_scale"],
    "replica-wakes-early": [
        REPLICA + "test_processing_times_keep_the_profiles_mean_at_a_time_scale",
        REPLICA + "test_a_replica_with_a_batch_size_serves_requests_together_and_takes_the_curves_time",
        "tests/examples/test_asr_service.py::"
        "test_the_example_service_is_served_and_checked_through_its_own_handler_and_client",
    ],
    "replica-cpu": ["scenarios/slo-testbed-ci.yaml", "scenarios/policies-ci.yaml"],
    "balancer-slow-forward": [
        "tests/metrics/test_balancer_replica_time.py::"
        "test_the_window_counts_the_replicas_time_and_busy_seconds_not_the_network",
    ],
    # not timing: the agent's behaviour, each plant failing one of ppo-testbed-ci's two checks
    "ppo-holds": ["scenarios/ppo-testbed-ci.yaml"],
    "ppo-scales-down": ["scenarios/ppo-testbed-ci.yaml"],
}


def run_case(tests: list[str], plant: str | None) -> tuple[dict[str, tuple[str, str]], float]:
    """Run `tests` under `plant` (None: unplanted); per test file or node id its outcome (passed,
    failed, skipped) and the first line of why, and the wall time."""
    env = dict(os.environ)
    # this checkout's testbed in every process, whichever is installed; the plant's folder after it
    paths = [str(ROOT)] + ([str(PLANTS_DIR)] if plant is not None else [])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*paths, env.get("PYTHONPATH")) if p)
    if plant is not None:
        env["TESTBED_PLANT"] = plant
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--machine-behind", "fail", f"--junitxml={xml}", *tests],
                       cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False)
        wall = time.monotonic() - started
        outcomes: dict[str, list[tuple[str, str]]] = {t: [] for t in tests}
        for case in ET.parse(xml).getroot().iter("testcase"):
            owner = next((t for t in tests if _owns(t, case)), None)
            if owner is not None:
                outcomes[owner].append(_outcome(case))
    return {t: _worst(o) for t, o in outcomes.items()}, wall


def _owns(test: str, case: ET.Element) -> bool:
    """Whether JUnit's `case` is `test` (a node id) or one of its items (a file)."""
    file, _, name = test.partition("::")
    classname = file.replace("/", ".").removesuffix(".py")
    return case.get("classname") == classname and (not name or case.get("name") == name)


def _outcome(case: ET.Element) -> tuple[str, str]:
    for tag in ("failure", "error"):
        el = case.find(tag)
        if el is not None:
            return "failed", (el.get("message") or "").splitlines()[0][:110] if el.get("message") else tag
    el = case.find("skipped")
    if el is not None:
        return "skipped", (el.get("message") or "")[:110]
    return "passed", ""


def _worst(outcomes: list[tuple[str, str]]) -> tuple[str, str]:
    """A file's items: failed if any failed, passed if all passed; no items: not run."""
    if not outcomes:
        return "not run", "no item collected"
    for want in ("failed", "skipped"):
        hit = next((o for o in outcomes if o[0] == want), None)
        if hit is not None:
            n = sum(o[0] == want for o in outcomes)
            return want, f"{n} of {len(outcomes)} items: {hit[1]}"
    return "passed", f"{len(outcomes)} items" if len(outcomes) > 1 else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated plants (default: all)")
    ap.add_argument("--control", action="store_true", help="also run each case without its plant")
    ap.add_argument("--no-busy", action="store_true", help="no CPU-bound process beside the runs")
    args = ap.parse_args()
    plants = [p for p in args.only.split(",") if p] or list(CASES)
    unknown = [p for p in plants if p not in CASES]
    if unknown:
        ap.error(f"unknown plant(s) {', '.join(unknown)}: choose from {', '.join(CASES)}")
    console = Console()
    busy = None if args.no_busy else subprocess.Popen([sys.executable, "-c", "while True: pass"])
    table = Table(title="timed tests under a planted regression"
                  + ("" if args.no_busy else ", beside `while True: pass`"))
    for col in ("plant", "test", "outcome", "why", "wall s"):
        table.add_column(col)
    lost_power = 0
    try:
        for plant in plants:
            runs = [plant] + ([None] if args.control else [])
            for p in runs:
                with console.status(f"{p or 'no plant'}: {len(CASES[plant])} test(s)"):
                    results, wall = run_case(CASES[plant], p)
                for test, (outcome, why) in results.items():
                    planted_pass = p is not None and outcome != "failed"
                    lost_power += planted_pass
                    style = "red" if planted_pass or (p is None and outcome == "failed") else ""
                    table.add_row(p or f"(none; {plant}'s tests)", test.replace("::", "::\n"),
                                  f"[{style}]{outcome}[/]" if style else outcome, why, f"{wall:.0f}")
                    wall = 0.0  # the case's wall time once, on its first row
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    console.print(table)
    if lost_power:
        console.print(f"[red]{lost_power} timed test(s) passed with a regression planted[/]")
        return 1
    console.print("every timed test failed on its planted regression")
    return 0


if __name__ == "__main__":
    sys.exit(main())
