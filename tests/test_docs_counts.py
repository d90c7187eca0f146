"""The counts the docs quote are the code's: the checks each slicing scenario carries
(docs/slicing.md) and the size of the suite (README)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parents[1]


def _checks(name: str) -> tuple[int, int]:
    expect = load_scenario(ROOT / "scenarios" / name).scenario.expect
    return len(expect), sum(line.rstrip().endswith("exploratory") for line in expect)


def test_the_slicing_page_quotes_each_scenarios_checks():
    text = " ".join((ROOT / "docs" / "slicing.md").read_text().split())
    found = re.search(r"`slicing\.yaml` carries all of them \((\d+), (\d+) of them exploratory\), "
                      r"`slicing-ci\.yaml` the (\d+)", text)
    assert found, "docs/slicing.md no longer says how many checks each scenario carries"
    full, exploratory, ci = map(int, found.groups())
    assert (full, exploratory) == _checks("slicing.yaml")
    assert ci == _checks("slicing-ci.yaml")[0]


@pytest.mark.slow
def test_the_readme_quotes_the_suites_size(request: pytest.FixtureRequest):
    """Within 3 %: the README rounds it ("about 1,340 tests"). A session of the whole suite (the
    README's command: its test paths, no -k or -m) counts its own items, as every pytest-xdist
    worker collects them all; any other collects the suite again (10 s of CPU)."""
    said = re.search(r"about ([\d,]+) tests", (ROOT / "README.md").read_text())
    assert said, "the README no longer says how many tests the suite has"
    config = request.config
    if (config.args_source == pytest.Config.ArgsSource.TESTPATHS and config.rootpath == ROOT
            and not config.getoption("keyword") and not config.getoption("markexpr")):
        n = len(request.session.items)
    else:
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                               "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        collected = re.search(r"(\d+) tests? collected", done.stdout)
        assert collected, done.stdout[-2000:]
        n = int(collected.group(1))
    quoted = int(said.group(1).replace(",", ""))
    assert abs(n - quoted) <= 0.03 * n, f"README says about {quoted} tests; {n} are collected"
