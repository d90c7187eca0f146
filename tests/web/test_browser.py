"""The live page in a real browser (headless Chromium, Debian's `chromium` and `chromium-driver`):
`testbed run scenarios/smoke.yaml --web` as a user starts it, the page's charts drawing the run
as it goes and moving within seconds, its figures at the end against results.json, the same page
from `testbed watch` on the finished run, and a screenshot of each (their paths are printed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.judge.outcome import recorded_outcomes
from testbed.judge.verdict import run_verdict
from testbed.pytest_plugin import TESTBED_GROUP

ROOT = Path(__file__).resolve().parents[2]
# headless as root in a closed network: without the background-networking flags Chromium's own
# connections out are refused, and it waits on them
CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--hide-scrollbars", "--window-size=1500,1000")
FIELDS = ("requests", "errors", "slo_violation_rate", "mean_latency_ms", "p50_latency_ms",
          "p99_latency_ms", "mean_replicas", "p99_lateness_ms")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium through selenium; skipped with the reason where one is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install -e .[dev])")
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_bin = shutil.which("chromedriver")
    if chromium is None or driver_bin is None:
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium "
                    "chromium-driver; scripts/setup --dev installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*CHROME_FLAGS, f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(driver_bin))
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(every)


def points(driver: Any, chart: str) -> int:
    return int(driver.execute_script(
        "const e = document.querySelector(`[data-chart='${arguments[0]}']`);"
        "return e ? Number(e.dataset.points) : 0;", chart))


def screenshot(driver: Any, path: Path) -> Path:
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1500, min(int(height) + 20, 6000))
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def page_figures(driver: Any) -> dict[str, dict[str, Any]]:
    """The services' table as the page shows it: per service and field, the value it holds (the
    figure itself, as JSON) and the text shown."""
    cells = driver.execute_script(
        "return [...document.querySelectorAll('#summary tr[data-service] td[data-field]')]"
        ".map(td => [td.parentElement.dataset.service, td.dataset.field, td.dataset.value ?? null,"
        " td.textContent]);")
    out: dict[str, dict[str, Any]] = {}
    for service, field, value, text in cells:
        out.setdefault(service, {})[field] = (None if value in (None, "null") else json.loads(value),
                                              text)
    return out


def assert_page_has_the_records_figures(driver: Any, run_dir: Path) -> None:
    record = json.loads((run_dir / "results.json").read_text())
    scenario = json.loads((run_dir / "manifest.json").read_text())["scenario"]
    verdict = run_verdict(recorded_outcomes(record, scenario["expect"]), record["rows"],
                          interrupted=record["interrupted"])
    wait_for("the verdict on the page", lambda: driver.execute_script(
        "const b = document.querySelector('[data-verdict]'); return b && b.dataset.verdict;"), 30)
    assert driver.execute_script("return document.querySelector('[data-verdict]').dataset.verdict"
                                 ) == verdict.verdict
    shown = page_figures(driver)
    services = [r for r in record["rows"] if r.get("service")]
    assert sorted(shown) == sorted(r["service"] for r in services)
    for row in services:
        for field in FIELDS:
            assert shown[row["service"]][field][0] == row[field], (row["service"], field)
        assert shown[row["service"]]["requests"][1] == f"{row['requests']:,}"
    for row in (r for r in record["rows"] if r.get("slice")):
        got = driver.execute_script(
            "const td = document.querySelector(`#goodput tr[data-slice='${arguments[0]}'] td[data-field]`);"
            "return td ? JSON.parse(td.dataset.value) : null;", row["slice"])
        assert got == row["iperf_goodput_mbit"]


@pytest.mark.needs_root
@pytest.mark.slow
@pytest.mark.timed
@pytest.mark.xdist_group(TESTBED_GROUP)  # a clock-timed scenario: never beside another
@pytest.mark.timeout(420)
def test_the_page_draws_a_run_as_it_goes_and_ends_with_its_records_figures(browser: Any, tmp_path: Path):
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed", "run", "scenarios/smoke.yaml", "--out", str(out),
         "--no-progress", "--web"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env=dict(os.environ, COLUMNS="200"))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        url = wait_for("the page's address", lambda: next(
            (m.group(1) for m in map(re.compile(r"live page: (http://\S+)").search, list(lines)) if m),
            None), 60)
        assert url.startswith("http://127.0.0.1:")  # localhost unless told otherwise
        browser.get(url)
        # the charts draw the run while it goes (replicas start first: up to a minute)
        wait_for("the charts drawing data", lambda: points(browser, "imgcls:latency") > 0
                 and browser.execute_script("return document.body.dataset.status") == "live", 120)
        before = (points(browser, "imgcls:rate"), browser.find_element("id", "progress-text").text)
        # ... and move: at time scale 2 a scenario second is half a wall second
        wait_for("the page moving", lambda: points(browser, "imgcls:rate") > before[0]
                 and browser.find_element("id", "progress-text").text != before[1], 3.0, every=0.1)
        assert all(points(browser, f"{s}:{c}") > 0 for s in ("chatbot", "imgcls", "tts")
                   for c in ("rate", "latency", "replicas"))
        assert points(browser, "net:uplink") > 0 and points(browser, "net:downlink") > 0
        screenshot(browser, tmp_path / "live-page-running.png")
        proc.wait(300)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    output = "".join(lines)
    [run_dir] = out.iterdir()
    assert (run_dir / "results.json").is_file(), output
    assert_page_has_the_records_figures(browser, run_dir)
    assert browser.execute_script("return document.body.dataset.status") in ("finished", "ended")
    screenshot(browser, tmp_path / "live-page-finished.png")

    # the same page for the finished run, from another process
    watch = subprocess.Popen([sys.executable, "-m", "testbed", "watch", str(run_dir)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = watch.stdout.readline() if watch.stdout else ""
        found = re.search(r"(http://127\.0\.0\.1:\d+/)", first)
        assert found, first
        browser.get(found.group(1))
        wait_for("the finished run's charts", lambda: points(browser, "imgcls:latency") > 0, 30)
        assert_page_has_the_records_figures(browser, run_dir)
        link = browser.find_element("id", "report-link")
        assert link.get_attribute("href").endswith("/report.html")
        screenshot(browser, tmp_path / "watch-finished.png")
        watch.send_signal(2)
        assert watch.wait(20) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
