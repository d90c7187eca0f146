"""Whether the live page changes a run's figures: a scenario run in turn with and without `--web`
(the page open in headless Chromium while it runs, where selenium, chromium and chromedriver are
installed), alternating, so that a change in the machine's load falls on both alike. Per run it
prints each service's figures from results.json (requests, SLO violation rate, mean and p99
latency, the clients' p99 lateness), the CPU seconds of the page's server and of the browser,
and per arm their mean and spread; the run-to-run spread of the runs without the page is the
noise to judge the difference by.

    python3 bench/web_overhead.py [scenarios/smoke.yaml] [--runs 2] [--no-browser]

Needs root (the scenario's namespaces), as `testbed run` does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIGURES = ("requests", "slo_violation_rate", "mean_latency_ms", "p99_latency_ms",
           "p99_lateness_ms")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def browser_cpu_s(seen: dict[int, float]) -> None:
    """The CPU seconds of every Chromium process so far into `seen` (pid -> seconds)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if b"chromium" in (proc / "cmdline").read_bytes():
                    seen[int(proc.name)] = cpu_s(int(proc.name)) or seen.get(int(proc.name), 0.0)
            except OSError:
                continue


def open_browser(url: str) -> Any:
    """Headless Chromium on `url` (the flags of tests/web/test_browser.py), or None."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1500,1000",
                 f"--user-data-dir={tempfile.mkdtemp()}"):
        options.add_argument(flag)
    browser = webdriver.Chrome(options=options, service=Service(driver))
    browser.get(url)
    return browser


def run_once(scenario: str, out: Path, web: bool, browser_wanted: bool) -> dict[str, Any]:
    """One `testbed run`; its rows, exit code, wall seconds and the page server's CPU seconds."""
    argv = [sys.executable, "-m", "testbed", "run", scenario, "--out", str(out), "--no-progress"]
    if web:
        argv.append("--web")
    began = time.monotonic()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True).start()
    browser, server, server_cpu = None, None, None
    chromium: dict[int, float] = {}
    while proc.poll() is None:
        if browser:
            browser_cpu_s(chromium)
        if web and server is None:
            server = next((c for c in children(proc.pid)
                           if b"testbed.web.server" in Path(f"/proc/{c}/cmdline").read_bytes()),
                          None)
        if web and browser_wanted and browser is None:
            url = next((m.group(1) for m in map(re.compile(r"live page: (\S+)").search,
                                                 list(lines)) if m), None)
            if url:
                browser = open_browser(url) or False
        if server is not None:
            server_cpu = cpu_s(server) or server_cpu
        time.sleep(0.5)
    wall = time.monotonic() - began
    if browser:
        browser.quit()
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    record = json.loads((run_dir / "results.json").read_text())
    return {"rows": [r for r in record["rows"] if r.get("service")], "rc": proc.returncode,
            "wall_s": wall, "server_cpu_s": server_cpu, "browser": bool(browser),
            "browser_cpu_s": sum(chromium.values()) if browser else None,
            "run_dir": str(run_dir)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", default="scenarios/smoke.yaml")
    parser.add_argument("--runs", type=int, default=2, help="runs with and without --web each")
    parser.add_argument("--no-browser", action="store_true", help="serve the page, open none")
    args = parser.parse_args()
    results: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    root = Path(tempfile.mkdtemp(prefix="web-overhead-"))
    print(f"{args.scenario}: {args.runs} runs each way, alternating; load {os.getloadavg()[0]:.2f}")
    for i in range(args.runs):
        for web in (False, True):
            out = root / f"{'web' if web else 'plain'}-{i}"
            out.mkdir()
            r = run_once(args.scenario, out, web, not args.no_browser)
            results[web].append(r)
            figures = "; ".join(
                f"{row['service']} " + " ".join(f"{_fmt(k, row.get(k))}" for k in FIGURES)
                for row in r["rows"])
            extra = (f", page server {r['server_cpu_s']:.2f} CPU s" + (
                f", the browser watching {r['browser_cpu_s']:.1f} CPU s" if r["browser"] else "")
                if web else "")
            print(f"run {i + 1} {'--web' if web else 'plain'}: exit {r['rc']}, "
                  f"{r['wall_s']:.0f} s wall{extra}\n    {figures}", flush=True)
    print("\nmean (sd) per arm; |difference| against the plain runs' sd")
    rows = [(row["cell"], row["service"]) for row in results[False][0]["rows"]]
    cells = len({c for c, _ in rows})
    for cell, service in rows:
        for k in FIGURES:
            arms = {w: [next(x[k] for x in r["rows"] if (x["cell"], x["service"]) == (cell, service))
                        for r in results[w]] for w in (False, True)}
            if any(v is None for vs in arms.values() for v in vs):
                continue
            m = {w: statistics.fmean(v) for w, v in arms.items()}
            sd = {w: statistics.stdev(v) if len(v) > 1 else 0.0 for w, v in arms.items()}
            name = f"{cell} {service}" if cells > 1 else service
            print(f"  {name:8} {k:20} plain {m[False]:10.4g} ({sd[False]:.3g})   "
                  f"--web {m[True]:10.4g} ({sd[True]:.3g})   diff {m[True] - m[False]:+.3g}")
    cpu = [r["server_cpu_s"] for r in results[True] if r["server_cpu_s"] is not None]
    if cpu:
        print(f"  page server CPU: {statistics.fmean(cpu):.2f} s per run "
              f"({statistics.fmean(cpu) / statistics.fmean(r['wall_s'] for r in results[True]):.1%}"
              " of one core over the run)")
    seen = [r["browser_cpu_s"] for r in results[True] if r["browser_cpu_s"] is not None]
    if seen:
        print(f"  headless Chromium watching: {statistics.fmean(seen):.1f} CPU s per run")
    print(f"run directories under {root}")
    return 0


def _fmt(key: str, v: Any) -> str:
    if v is None:
        return f"{key}=–"
    if key == "slo_violation_rate":
        return f"viol={v:.3%}"
    if key == "requests":
        return f"n={v}"
    return f"{key.removesuffix('_ms').replace('_latency', '')}={v:.1f}"


if __name__ == "__main__":
    sys.exit(main())
