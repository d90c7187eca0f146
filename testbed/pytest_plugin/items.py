"""The items of a scenario file: one per matrix cell, running its repetitions, and a last
`expect` item judging the scenario's `expect:` block over all cells."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.clock import ScenarioClock
from testbed.errors import TestbedError
from testbed.judge.verdict import MACHINE_BEHIND as MACHINE_BEHIND_VERDICT
from testbed.judge.verdict import run_verdict
from testbed.pytest_plugin.timing import MachineBehind, timed_priority, worker_group


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
        group = worker_group(self.path, loaded.scenario.engine)
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


class ScenarioItem(pytest.Item):
    """An item of a scenario file: its own failures, the harness's and a machine behind are
    reported as their message alone, and pytest places it at the file, by `where()`."""

    own_failure: type[Exception] = Exception

    def where(self) -> str:
        raise NotImplementedError

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str:
        """The failure in `excinfo` as its message alone when it is the item's own or the
        harness's, else pytest's traceback."""
        if isinstance(excinfo.value, self.own_failure | TestbedError | MachineBehind):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        """Where pytest says the item is: the scenario file, and which cell or its expect."""
        return self.path, 0, f"scenario {self.parent.name} {self.where()}"


class ScenarioCellFailed(Exception):
    """A cell's repetition ended with a status other than ok; the message names the run directory."""


class ScenarioCellItem(ScenarioItem):
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

    own_failure = ScenarioCellFailed

    def where(self) -> str:
        return f"cell {self.name}"


class ExpectFailed(Exception):
    """An `expect:` check FAILed, could not read a cell, or is UNDECIDED (never a pass); the
    message lists each, with its reason, and the report."""


class ScenarioExpectItem(ScenarioItem):
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

    own_failure = ExpectFailed

    def where(self) -> str:
        return "expect"
