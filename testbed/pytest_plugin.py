"""pytest plugin: every `scenarios/*.yaml` file is a test; each matrix cell is an item, and a
last item named `expect` checks the scenario's `expect:` block over all cells.

    python3 -m pytest scenarios/ [--scenario-time-scale 10] [--scenario-duration 60]
                                 [--scenario-slow] [--scenario-out runs]

Scenarios with `markers: [slow]` are skipped unless --scenario-slow is given; testbed-engine
scenarios need root and network namespaces and are skipped with a reason without them. Every
item carries the `scenario` marker: `pytest -m "not scenario and not slow"` is the quick path.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.errors import TestbedError


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("testbed scenarios")
    group.addoption("--scenario-time-scale", type=float, default=None,
                    help="override every scenario's time-scale factor")
    group.addoption("--scenario-duration", type=float, default=None,
                    help="override every scenario's seconds per cell (a shorter window)")
    group.addoption("--scenario-slow", action="store_true", default=False,
                    help="also run scenarios marked slow (full reproductions)")
    group.addoption("--scenario-out", default="runs", help="parent folder of run directories")


def pytest_configure(config: pytest.Config) -> None:
    for line in ("slow: takes more than a few seconds",
                 "needs_root: needs root and network namespaces",
                 "scenario: an item of a scenarios/*.yaml file (a matrix cell or its expect)"):
        config.addinivalue_line("markers", line)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix in (".yaml", ".yml") and file_path.parent.name == "scenarios":
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


def _root_reason() -> str | None:
    if os.geteuid() != 0:
        return "testbed scenarios need root (network namespaces, tc)"
    missing = [b for b in ("ip", "tc", "iperf3") if shutil.which(b) is None]
    return f"missing {', '.join(missing)}" if missing else None


class ScenarioFile(pytest.File):
    """One scenario file; its items share one run directory."""

    run: Any = None

    def collect(self):  # type: ignore[no-untyped-def]
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
        scale = self.config.getoption("--scenario-time-scale") or loaded.scenario.time_scale
        seconds = self.config.getoption("--scenario-duration") or loaded.scenario.duration_s
        for cell in expand(loaded.scenario, loaded.testbed):
            item = ScenarioCellItem.from_parent(self, name=cell.label, cell=cell)
            for m in markers:
                item.add_marker(getattr(pytest.mark, m))
            if loaded.scenario.engine == "testbed":
                # a cell takes its wall time plus startup and teardown, per repetition
                budget = (seconds / scale + 120) * loaded.scenario.repetitions
                item.add_marker(pytest.mark.timeout(max(300, int(budget))))
            yield item
        item = ScenarioExpectItem.from_parent(self, name="expect")
        for m in markers:
            item.add_marker(getattr(pytest.mark, m))
        yield item

    def get_run(self) -> Any:
        if self.run is None:
            # the runner and the whole data plane: only when a scenario runs
            from testbed.scenario.runner import RunOptions, ScenarioRun

            opts = self.config.option
            self.run = ScenarioRun(self.loaded, RunOptions(
                out_root=Path(opts.scenario_out), time_scale=opts.scenario_time_scale,
                duration_s=opts.scenario_duration, progress=False))
        return self.run


class ScenarioCellFailed(Exception):
    pass


class ScenarioCellItem(pytest.Item):
    def __init__(self, *, cell: Any, **kw: Any):
        super().__init__(**kw)
        self.cell = cell

    def runtest(self) -> None:
        import json

        run = self.parent.get_run()
        problems = run.run_cell(self.cell)
        self.user_properties.append(("run_dir", str(run.run_dir)))
        self.add_report_section("call", "scenario", f"run directory: {run.run_dir}\n"
                                + "".join(f"problem: {p}\n" for p in problems))
        statuses = [json.loads(p.read_text()).get("status")
                    for p in (run.run_dir / "cells" / self.cell.slug).glob("rep-*/cell.json")]
        if any(s != "ok" for s in statuses):
            raise ScenarioCellFailed(f"cell {self.cell.label}: status {statuses}; "
                                     f"problems: {problems}; run directory {run.run_dir}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str:
        if isinstance(excinfo.value, ScenarioCellFailed | TestbedError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"scenario {self.parent.name} cell {self.name}"


class ExpectFailed(Exception):
    pass


class ScenarioExpectItem(pytest.Item):
    def runtest(self) -> None:
        run = self.parent.get_run()
        from testbed.report import write_report  # matplotlib: only when a scenario ran

        result = run.finish()
        write_report(result.run_dir)
        self.user_properties.append(("run_dir", str(result.run_dir)))
        lines = [f"{o.verdict}  {o.text}  ({o.explain()})" for o in result.outcomes]
        self.add_report_section("call", "expect", "\n".join(lines) +
                                f"\nreport: {result.run_dir / 'report.html'}")
        # as `testbed run`: FAIL fails, and UNDECIDED for a lost cell or one without requests
        failed = [line for line, o in zip(lines, result.outcomes, strict=True) if o.fails_run]
        if failed:
            raise ExpectFailed("\n".join([f"{len(failed)} of {len(lines)} expectations failed "
                                          f"(report: {result.run_dir / 'report.html'}):", *failed]))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str:
        if isinstance(excinfo.value, ExpectFailed | TestbedError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"scenario {self.parent.name} expect"
