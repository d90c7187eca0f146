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

import contextlib
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.clock import ScenarioClock
from testbed.errors import TestbedError
from testbed.judge.verdict import MACHINE_BEHIND as MACHINE_BEHIND_VERDICT
from testbed.judge.verdict import run_verdict

SUFFIXES = (".yaml", ".yml")
# today's rule as globs: the YAML files directly inside any folder named `scenarios`
DEFAULT_GLOBS = ["**/scenarios/*.yaml", "**/scenarios/*.yml"]
_SCENARIO_KEYS = re.compile(r"^(?:duration_s|services)\s*:", re.M)
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


def glob_regex(pattern: str) -> re.Pattern[str]:
    """The regular expression of the glob `pattern`: `**/` any folders (none too), `**` anything,
    `*` and `?` within one name, `[...]` one of a set (`[!...]` none of it)."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2:]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1:end]
            negate = body.startswith("!")
            body = re.escape(body[1:] if negate else body).replace("\\-", "-")
            out.append(f"[{'^' if negate else ''}{body}]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def matches_glob(path: Path, globs: list[re.Pattern[str]], root: Path) -> bool:
    """Whether `path` matches one of `globs` (from glob_regex): a relative glob is matched
    against the path from `root` (for a path outside `root`, against its absolute path without
    the leading slash, which only a glob starting with `**/` can match), an absolute one
    against the absolute path."""
    full = Path(os.path.abspath(path)).as_posix()
    try:
        rel = Path(os.path.abspath(path)).relative_to(Path(os.path.abspath(root))).as_posix()
    except ValueError:
        rel = full.lstrip("/")
    return any(g.fullmatch(full if g.pattern.startswith("/") else rel) for g in globs)


def looks_like_scenario(path: Path) -> bool:
    """Whether the YAML file at `path` is a scenario rather than another YAML file: a mapping
    with `duration_s` or a list of `services:` (a profile file's `services:` is a mapping).
    A file that does not parse counts when a line starts with `duration_s:` or `services:`,
    so that a scenario with a YAML error is reported rather than left out."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError:
        return _SCENARIO_KEYS.search(text) is not None
    return isinstance(raw, dict) and ("duration_s" in raw or isinstance(raw.get("services"), list))


def _root_reason() -> str | None:
    if os.geteuid() != 0:
        return "testbed scenarios need root (network namespaces, tc)"
    missing = [b for b in ("ip", "tc", "iperf3") if shutil.which(b) is None]
    return f"missing {', '.join(missing)}" if missing else None


class ScenarioFile(pytest.File):
    """One scenario file (pytest's `path`, given to `from_parent` with its `parent` collector);
    its items share one run directory."""

    run: Any = None

    def collect(self):  # type: ignore[no-untyped-def]
        """Yield an item per matrix cell and a last `expect` item; one skipped `expect` item when
        the scenario is slow without --scenario-slow or needs root that is not there."""
        # pytest loads this plugin for every session: the scenario layer (pydantic, the data
        # plane) only when a scenario file is collected
        from testbed.scenario.load import load_scenario
        from testbed.scenario.matrix import expand

        try:
            raw = yaml.safe_load(self.path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise self.CollectError(f"{self.path}: invalid YAML: {exc}") from None
        markers = list(raw.get("markers") or []) if isinstance(raw, dict) else []
        markers.append("scenario")  # every item: `-m "not scenario"` leaves them all out
        engine = raw.get("engine", "testbed") if isinstance(raw, dict) else "testbed"
        if engine == "testbed" and "needs_root" not in markers:
            markers.append("needs_root")
        skip: str | None = None
        if "slow" in markers and not self.config.getoption("--scenario-slow"):
            skip = "slow scenario (a full reproduction): run it with --scenario-slow"
        elif "needs_root" in markers:
            skip = _root_reason()
        if skip is not None:
            item = ScenarioExpectItem.from_parent(self, name="expect")
            for m in markers:
                item.add_marker(getattr(pytest.mark, m))
            item.add_marker(pytest.mark.skip(reason=skip))
            yield item
            return
        try:
            loaded = load_scenario(self.path)
        except TestbedError as exc:
            raise self.CollectError(str(exc)) from None
        self.loaded = loaded
        group = _worker_group(self.path, loaded.scenario.engine)
        scale = self.config.getoption("--scenario-time-scale") or loaded.scenario.time_scale
        seconds = self.config.getoption("--scenario-duration") or loaded.scenario.duration_s
        for cell in expand(loaded.scenario, loaded.testbed):
            item = ScenarioCellItem.from_parent(self, name=cell.label, cell=cell)
            item.add_marker(group)
            for m in markers:
                item.add_marker(getattr(pytest.mark, m))
            if loaded.scenario.engine == "testbed":
                # a cell takes its wall time plus startup and teardown, per repetition
                budget = (ScenarioClock(scale).wall(seconds) + 120) * loaded.scenario.repetitions
                item.add_marker(pytest.mark.timeout(max(300, int(budget))))
            yield item
        item = ScenarioExpectItem.from_parent(self, name="expect")
        item.add_marker(group)
        for m in markers:
            item.add_marker(getattr(pytest.mark, m))
        yield item

    def get_run(self) -> Any:
        """The scenario's run (a ScenarioRun with the command line's overrides), started on
        first use and shared by the file's items."""
        if self.run is None:
            # the runner and the whole data plane: only when a scenario runs
            from testbed.scenario.runner import RunOptions, ScenarioRun

            opts = self.config.option
            self.run = ScenarioRun(self.loaded, RunOptions(
                out_root=Path(opts.scenario_out), time_scale=opts.scenario_time_scale,
                duration_s=opts.scenario_duration, progress=False))
        return self.run


TESTBED_GROUP = "testbed-scenarios"
# The tests that bring up a testbed of their own (to check what it does, not when) share another
# group: one at a time beside the scenarios. Each one's namespaces and qdiscs going up or down
# stalled both cores for 20-48 ms (every client of a scenario late at once).
BESIDE_GROUP = "testbed-beside"
# Under -n, a worker's untimed tests run at WORKER_NICE, below the kernel's own threads (the
# softirq threads that carry a testbed's packets run at nice 0), and a timed test's at 0. Raising
# the timed ones instead (nice -10, or real-time round robin) left the network-heavy scenarios'
# clients 20-50 ms behind their schedule, or starved them behind their own cell's replicas. A test
# that needs root but is not timed (it brings up a testbed to check what it does, not when) runs
# at BESIDE_NICE: ahead of the untimed tests, behind a timed one. At TIMED_NICE, a second testbed
# beside a timed scenario (a policy's planning, its own clients and iperf3 flows) left two
# scenarios' clients 83-128 ms behind beside a CPU-bound process.
WORKER_NICE = 10
BESIDE_NICE = 5
TIMED_NICE = 0


def lower_worker_priority() -> None:
    """In a pytest-xdist worker, as root: this process's tests yield to the timed ones (see
    timed_priority) and to the kernel's threads. Elsewhere nothing changes (without root a timed
    test could not come back up)."""
    if os.geteuid() == 0 and "PYTEST_XDIST_WORKER" in os.environ:
        os.setpriority(os.PRIO_PROCESS, 0, WORKER_NICE)


@contextlib.contextmanager
def timed_priority(nice: int = TIMED_NICE) -> Iterator[None]:
    """Within it, this thread and the threads and processes it starts run at `nice` (TIMED_NICE,
    or BESIDE_NICE for a test that needs root but is not timed), ahead of the workers' untimed
    tests (WORKER_NICE): under pytest-xdist (-n) a test timed against the clock (a testbed
    scenario's cells, a replica's processing times) would otherwise share the cores with the
    other workers' CPU-bound tests and be judged on their load. Only as root and in an xdist
    worker; a no-op elsewhere."""
    if os.geteuid() != 0 or "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


def _worker_group(path: Path, engine: str) -> pytest.MarkDecorator:
    """The pytest-xdist group of a scenario's items (`-n N --dist loadgroup`): a file's cells and
    its expect item share one run, so they stay on one worker; every testbed-engine scenario
    shares one group, so no two of them run at once (each is timed against the clock, and two
    would share the cores); a simulator scenario is a group of its own."""
    return pytest.mark.xdist_group(TESTBED_GROUP if engine == "testbed" else f"sim:{path}")


class MachineBehind(Exception):
    """A timed test failed because this machine fell behind (its clients sent late), not because
    of what it tests: `lateness` is the p99 lateness per service (scenario ms) that the check
    measured. The plugin re-runs the test once when `rerun` (calling its `before_rerun()` first,
    when it has one); if it falls behind again it is reported as MACHINE BEHIND."""

    def __init__(self, what: str, lateness: dict[str, float], *, rerun: bool = True):
        super().__init__(what)
        self.lateness = lateness
        self.rerun = rerun


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


class ScenarioCellFailed(Exception):
    """A cell's repetition ended with a status other than ok; the message names the run directory."""


class ScenarioCellItem(pytest.Item):
    """One matrix cell of a scenario: `cell` is the expanded cell (its label, slug and
    parameters), `kw` pytest's item arguments (`name`, `parent`)."""

    def __init__(self, *, cell: Any, **kw: Any):
        super().__init__(**kw)
        self.cell = cell

    def runtest(self) -> None:
        """Run every repetition of the cell; fails when one's status is not ok."""
        import json

        run = self.parent.get_run()
        # the run's own cell: it carries --scenario-time-scale and --scenario-duration
        cell = next((c for c in run.cells if c.slug == self.cell.slug), self.cell)
        if self.parent.loaded.scenario.engine == "testbed":
            with timed_priority():
                problems = run.run_cell(cell)
        else:
            problems = run.run_cell(cell)
        self.user_properties.append(("run_dir", str(run.run_dir)))
        self.add_report_section("call", "scenario", f"run directory: {run.run_dir}\n"
                                + "".join(f"problem: {p}\n" for p in problems))
        infos = [json.loads(p.read_text())
                 for p in (run.run_dir / "cells" / self.cell.slug).glob("rep-*/cell.json")]
        statuses = [i.get("status") for i in infos]
        failed = [i for i in infos if i.get("status") != "ok"]
        # the machine's alone (testbed.scenario.machine): clients late, replicas starved
        if failed and all(i.get("status") == "behind" for i in failed):
            late = {s: max((i.get("behind_schedule") or {}).get(s, 0.0) for i in failed)
                    for s in {s for i in failed for s in i.get("behind_schedule") or {}}}
            why = sorted({line for i in failed for line in (i.get("behind") or {}).values()})
            self.parent.behind = getattr(self.parent, "behind", set()) | {self.cell.label}
            raise MachineBehind(f"cell {self.cell.label}: " + "; ".join(why)
                                + f"; run directory {run.run_dir}", late)
        if failed:
            raise ScenarioCellFailed(f"cell {self.cell.label}: status {statuses}; "
                                     f"problems: {problems}; run directory {run.run_dir}")

    def before_rerun(self) -> None:
        """Before MachineBehind's re-run: the first try's files move to `retried/` of the run
        directory (kept, out of the results) and its problems out of the run's."""
        from testbed.scenario.results import FELL_BEHIND  # the scenario layer: a scenario ran

        run = self.parent.get_run()
        src = run.run_dir / "cells" / self.cell.slug
        dst = run.run_dir / "retried" / self.cell.slug
        dst.parent.mkdir(exist_ok=True)
        shutil.rmtree(dst, ignore_errors=True)
        src.rename(dst)
        run.problems = [p for p in run.problems if FELL_BEHIND not in p]
        self.parent.behind = getattr(self.parent, "behind", set()) - {self.cell.label}

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str:
        """The failure in `excinfo` as its message alone when it is the cell's or the harness's,
        else pytest's traceback."""
        if isinstance(excinfo.value, ScenarioCellFailed | TestbedError | MachineBehind):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        """Where pytest says the item is: the scenario file, and which cell."""
        return self.path, 0, f"scenario {self.parent.name} cell {self.name}"


class ExpectFailed(Exception):
    """An `expect:` check FAILed, could not read a cell, or is UNDECIDED (never a pass); the
    message lists each, with its reason, and the report."""


class ScenarioExpectItem(pytest.Item):
    """The scenario's `expect:` block over all its cells (pytest's `name` and `parent` as for
    any item); it also writes the run's results and report."""

    def runtest(self) -> None:
        """Finish the run, write its report, and fail when a check fails the run (as `testbed
        run` exits 1)."""
        run = self.parent.get_run()
        from testbed.report import write_report  # matplotlib: only when a scenario ran

        result = run.finish()
        write_report(result.run_dir)
        self.user_properties.append(("run_dir", str(result.run_dir)))
        lines = [f"{o.verdict}  {o.text}  ({o.explain()})" for o in result.outcomes]
        self.add_report_section("call", "expect", "\n".join(lines) +
                                f"\nreport: {result.run_dir / 'report.html'}")
        # the one rule of `testbed run` (testbed.judge.verdict): FAIL and UNDECIDED fail the
        # item, a failed cell too; an UNDECIDED `exploratory` check alone makes it an xfail
        verdict = run_verdict(
            result.outcomes, result.rows, interrupted=result.interrupted,
            allow_undecided=self.config.getoption("--scenario-allow-undecided"))
        if verdict.verdict == MACHINE_BEHIND_VERDICT:  # the machine's: never a pass, nor a FAIL
            raise MachineBehind(f"{verdict.verdict}: {len(verdict.failing)} of {len(lines)} "
                                f"expectations read cells the machine fell behind in "
                                f"({', '.join(verdict.behind_cells)}; report: "
                                f"{result.run_dir / 'report.html'})", {}, rerun=False)
        if verdict.exit_code:
            raise ExpectFailed("\n".join([
                f"{verdict.verdict}: {len(verdict.failing)} of {len(lines)} expectations failed "
                f"or undecided (report: {result.run_dir / 'report.html'}):",
                *(f"{o.verdict}  {o.text}  ({o.explain()})" for o in verdict.failing),
                *(f"failed cell: {c}" for c in verdict.failed_cells)]))
        if verdict.allowed_undecided:
            pytest.xfail("undecided, exploratory or allowed: " + "; ".join(
                f"{o.text} ({o.explain()})" for o in verdict.allowed_undecided))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str:
        """The failure in `excinfo` as its message alone when it is the checks' or the harness's,
        else pytest's traceback."""
        if isinstance(excinfo.value, ExpectFailed | TestbedError | MachineBehind):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        """Where pytest says the item is: the scenario file, and its expect block."""
        return self.path, 0, f"scenario {self.parent.name} expect"
