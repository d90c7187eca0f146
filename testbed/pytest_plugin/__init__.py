"""pytest plugin: every scenario file is a test; each matrix cell is an item, and a last item
named `expect` checks the scenario's `expect:` block over all cells.

    python3 -m pytest scenarios/ [--scenario-time-scale 10] [--scenario-duration 60]
                                 [--scenario-slow] [--scenario-out runs]
    python3 -m pytest path/to/my-scenario.yaml        # a scenario named is collected wherever it is
    python3 -m pytest my-exps/ --scenario-glob 'my-exps/**/*.yaml'

Which YAML files are scenarios: a `.yaml`/`.yml` file that is named on the command line or
matches one of the scenario globs, and that reads as a scenario (a mapping with `duration_s` or
a `services:` list; a file that does not parse is collected, so that its error is reported).
Service-profile files (`services:` is a mapping), testbed files, playbooks and CI configs are
never collected. The globs come from `--scenario-glob GLOB` (repeatable), else from the ini
option `testbed_scenarios` (pytest.ini, or `[tool.pytest.ini_options]` in pyproject.toml):

    [tool.pytest.ini_options]
    testbed_scenarios = ["scenarios/*.yaml", "my-exps/**/*.yaml"]

else from the default `**/scenarios/*.yaml **/scenarios/*.yml`: the files of any folder named
`scenarios` (not its subfolders: `scenarios/profiles/` holds profile files). A relative glob is
matched from pytest's rootdir (the folder of the ini file), an absolute one against the whole
path; `**` spans folders, `*` and `?` stay within one name. A glob says which files are
scenarios in the folders pytest walks (its arguments, or `testpaths`): it does not add folders.

A timed test that fails because the machine fell behind (its clients sent late, by the cell's
lateness check: testbed.scenario.results.behind_schedule) raises MachineBehind: it is re-run
once, after a pause (`--machine-behind-pause`), and if it falls behind again it is reported as
MACHINE BEHIND with the lateness measured, never as a pass (see `--machine-behind`).

Scenarios with `markers: [slow]` are skipped unless --scenario-slow is given; testbed-engine
scenarios need root and network namespaces and are skipped with a reason without them. Every
item carries the `scenario` marker: `pytest -m "not scenario and not slow"` is the quick path.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.pytest_plugin.items import (
    ExpectFailed,
    ScenarioCellFailed,
    ScenarioCellItem,
    ScenarioExpectItem,
    ScenarioFile,
)
from testbed.pytest_plugin.selection import (
    DEFAULT_GLOBS,
    SUFFIXES,
    glob_regex,
    looks_like_scenario,
    matches_glob,
)
from testbed.pytest_plugin.timing import (
    BESIDE_GROUP,
    BESIDE_NICE,
    TESTBED_GROUP,
    TIMED_NICE,
    WORKER_NICE,
    MachineBehind,
    lower_worker_priority,
    timed_priority,
)

# the plugin's names, importable from here as before its parts had modules of their own
__all__ = ["BESIDE_GROUP", "BESIDE_NICE", "DEFAULT_GLOBS", "MACHINE_BEHIND", "SUFFIXES", "TESTBED_GROUP",
           "TIMED_NICE", "WORKER_NICE", "ExpectFailed", "MachineBehind", "ScenarioCellFailed",
           "ScenarioCellItem", "ScenarioExpectItem", "ScenarioFile", "glob_regex", "looks_like_scenario",
           "lower_worker_priority", "matches_glob", "timed_priority"]

_WHERE = pytest.StashKey[tuple[list[tuple[str, "re.Pattern[str]"]], set[Path]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the scenario options on `parser` (pytest's option and ini parser)."""
    group = parser.getgroup("testbed scenarios")
    group.addoption("--scenario-time-scale", type=float, default=None,
                    help="override every scenario's time-scale factor")
    group.addoption("--scenario-duration", type=float, default=None,
                    help="override every scenario's seconds per cell (a shorter window)")
    group.addoption("--scenario-slow", action="store_true", default=False,
                    help="also run scenarios marked slow (full reproductions)")
    group.addoption("--scenario-out", default="runs", help="parent folder of run directories")
    group.addoption("--scenario-allow-undecided", action="store_true", default=False,
                    help="exploration: an UNDECIDED expect: check does not fail the item")
    group.addoption("--scenario-glob", action="append", default=None, metavar="GLOB",
                    help="which YAML files are scenarios, from the rootdir (repeatable; "
                         "replaces the ini option testbed_scenarios; default: "
                         + " ".join(DEFAULT_GLOBS) + ")")
    group.addoption("--machine-behind", choices=("report", "fail"), default="report",
                    help="a timed test whose clients fell behind twice (the machine's fault, "
                         "MachineBehind): 'report' (default) lists it apart, as neither a pass nor "
                         "a failure; 'fail' fails the session (CI, on a machine of its own)")
    group.addoption("--machine-behind-pause", type=float, default=10.0, metavar="SECONDS",
                    help="wait this long before re-running a test the machine fell behind in "
                         "(default 10): its second try should not meet the same burst of its "
                         "neighbours' work")
    parser.addini("testbed_scenarios", type="args", default=list(DEFAULT_GLOBS),
                  help="globs of scenario files, from the rootdir (default: "
                       + " ".join(DEFAULT_GLOBS) + ")")


def pytest_configure(config: pytest.Config) -> None:
    """Declare the markers scenario items carry, and note on `config` (the session's pytest
    config) the scenario globs and the files named on the command line."""
    for line in ("slow: takes more than a few seconds",
                 "needs_root: needs root and network namespaces",
                 "scenario: an item of a scenario file (a matrix cell or its expect)",
                 "xdist_group(name): pytest-xdist's --dist loadgroup runs a group on one worker",
                 "timed: asserts on wall-clock time; under -n it runs ahead of untimed tests"):
        config.addinivalue_line("markers", line)
    lower_worker_priority()
    globs = config.getoption("scenario_glob") or config.getini("testbed_scenarios")
    named = {(config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args}
    config.stash[_WHERE] = ([(g, glob_regex(g)) for g in globs], named)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A ScenarioFile for `file_path` when it is a scenario (named on the command line or matched
    by a scenario glob, and a scenario by its content), else None; `parent` is the collector of
    its folder."""
    if file_path.suffix not in SUFFIXES:
        return None
    config = parent.config
    globs, named = config.stash[_WHERE]
    if file_path.resolve() not in named and not matches_glob(file_path, [g for _, g in globs],
                                                             config.rootpath):
        return None
    if not looks_like_scenario(file_path):
        return None
    return ScenarioFile.from_parent(parent, path=file_path)


_FIRST_TRY = pytest.StashKey[str]()
MACHINE_BEHIND = "machine_behind"  # the user property of a report that fell behind


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Run `item`; when it raises MachineBehind (and may be re-run), once more."""
    try:
        return (yield)
    except MachineBehind as first:
        if not first.rerun:
            raise
        item.stash[_FIRST_TRY] = str(first)
        # a 4-second test re-run at once met the same neighbours (a testbed going up, a scenario
        # cell's flows) and fell behind again in busy-suite run 8
        time.sleep(item.config.getoption("machine_behind_pause"))
        before = getattr(item, "before_rerun", None)
        if before is not None:
            before()
        return item.runtest()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[pytest.TestReport]:
    """The report of `item`'s `call`: a test that fell behind (twice, or once where it is not
    re-run) carries the lateness, and is skipped-not-passed unless --machine-behind fail."""
    report = yield
    exc = call.excinfo.value if call.excinfo is not None else None
    if call.when != "call" or not isinstance(exc, MachineBehind):
        return report
    first = item.stash.get(_FIRST_TRY, None)
    text = (f"the machine fell behind: {exc}" + (f" (first try: {first})" if first else "")
            + "; rerun on a quieter machine or at a lower time scale")
    report.user_properties.append((MACHINE_BEHIND, text))
    if item.config.getoption("machine_behind") == "report":
        report.outcome = "skipped"
        report.longrepr = (str(item.path), 0, text)
    return report


def _behind(report: pytest.TestReport) -> str | None:
    return next((v for k, v in getattr(report, "user_properties", ()) if k == MACHINE_BEHIND), None)


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config
                             ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
    """A report that fell behind is its own category, `machine behind` (letter M)."""
    if report.when == "call" and _behind(report) is not None:
        return "machine behind", "M", ("MACHINE BEHIND", {"yellow": True})
    return None


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """One line per test that fell behind, with the lateness measured."""
    reports = terminalreporter.stats.get("machine behind", [])
    if reports:
        terminalreporter.section("tests the machine fell behind in", sep="=", yellow=True)
        for r in reports:
            terminalreporter.line(f"MACHINE BEHIND {r.nodeid}: {_behind(r)}")
