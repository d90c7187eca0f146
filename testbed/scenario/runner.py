"""Runs a scenario end to end on any profile, cell by cell, into a run directory.

For each matrix cell and repetition the profile (`testbed.scenario.backends`) prepares the cell
and supplies a cluster backend, a metrics source and a traffic backend; `testbed.scenario.cell`
then does the same on every profile: replicas ready → iperf3 + clients → a sample every scenario
second (5 on the lab) and a scaler decision every period → stop → records. Local: a fresh testbed
per cell, the cell's asyncio work in the data-network namespace, clients in UE namespaces. Lab:
the lab's Deployments, Prometheus and UE hosts (`testbed.scenario.lab`). At the end, the rows of
every cell and the scenario's expectations (`results.json`). `engine: sim` cells may run in
parallel (`RunOptions.jobs`, `RunOptions.dask`: `testbed.scenario.sweep`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console

from testbed.errors import MissingRequirement, TestbedError
from testbed.judge.outcome import Outcome, evaluate_all
from testbed.judge.verdict import Verdict, failed_cells, run_verdict
from testbed.metrics.server import find_prometheus
from testbed.net.cmd import require_root
from testbed.paths import RUNS_DIR, new_run_dir
from testbed.scenario.backends import LocalProfile, Profile
from testbed.scenario.cell import CellRunner
from testbed.scenario.cellplan import RunCompiler
from testbed.scenario.live import LiveView
from testbed.scenario.load import LoadedScenario
from testbed.scenario.matrix import Cell, expand
from testbed.scenario.results import RECORD, run_rows
from testbed.scenario.rundir import CellDir, write_manifest
from testbed.scenario.simcell import SimCellRunner, write_cell_files
from testbed.scenario.spec import Scenario
from testbed.scenario.sweep import (
    check_options,
    run_in_pool,
    run_on_dask,
    start_pool,
    too_short,
    workers,
)


@dataclass
class RunOptions:
    """How `run_scenario` runs a loaded scenario: where the run directory goes, the profile, the
    command line's overrides, the live view, and (lab) the lab's options."""
    out_root: Path = RUNS_DIR
    profile: str = "local"
    time_scale: float | None = None  # overrides the scenario's
    replica_work: str | None = None  # overrides the scenario's (real or sleep)
    duration_s: float | None = None  # overrides the scenario's (a shorter window for CI)
    repetitions: int | None = None
    metrics: str | None = None  # overrides the scenario's `metrics:` (in-process or prometheus)
    progress: bool = True
    console: Console | None = None
    run_dir: Path | None = None
    lab: Any = None  # testbed.scenario.lab.LabOptions for the lab profile (inventory, --check)
    # builds the profile from the run (Python callers and tests: a lab profile on other clients)
    profile_factory: Callable[[ScenarioRun], Profile] | None = None
    jobs: int = 1  # engine: sim: cells at once on this machine (0: every core)
    dask: str | None = None  # engine: sim: the Dask scheduler (tcp://HOST:PORT) to run cells on


@dataclass
class RunResult:
    """A finished run: its directory, result rows, checks' outcomes, whether it was interrupted, and
    its problems."""
    run_dir: Path
    rows: list[dict[str, Any]]
    outcomes: list[Outcome]
    interrupted: bool = False
    problems: list[str] = field(default_factory=list)

    def verdict(self, allow_undecided: bool = False) -> Verdict:
        """The run's verdict (testbed.judge.verdict: the one rule every caller uses).

        allow_undecided: an UNDECIDED check counts as a pass (exploration)."""
        return run_verdict(self.outcomes, self.rows, interrupted=self.interrupted,
                           allow_undecided=allow_undecided)

    @property
    def failed_cells(self) -> list[str]:
        """The cells (and repetitions) whose status is not ok (nor "planned", the lab's --check):
        lost requests, or a problem that fails the cell (its metrics sources disagreeing,
        `CellRunner.fail`)."""
        return failed_cells(self.rows)

    @property
    def passed(self) -> bool:
        """The run's verdict exits 0 (PASS, or no checks and nothing failed)."""
        return self.verdict().passed


MIN_FREE_MB = 200  # request records, samples and plots of a CI-size run take a few MB; a day, ~100


def require_free_space(folder: Path, need_mb: int = MIN_FREE_MB) -> None:
    """Enough room where the run directory goes, checked before the first second of work.

    folder: where the run directory goes; need_mb: the room it needs."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free_mb = shutil.disk_usage(probe).free // 2**20
    if free_mb < need_mb:
        raise MissingRequirement(f"{folder}: {free_mb} MB free, a run needs at least {need_mb} MB "
                                 "(free some space or pass --out elsewhere)")


def effective(loaded: LoadedScenario, options: RunOptions) -> Scenario:
    """The scenario with command-line overrides applied.

    loaded: the scenario; options: the run's options."""
    update: dict[str, Any] = {}
    if options.time_scale is not None:
        update["time_scale"] = options.time_scale
    if options.replica_work is not None:
        update["replica_work"] = options.replica_work
    if options.duration_s is not None:
        update["duration_s"] = options.duration_s
    if options.repetitions is not None:
        update["repetitions"] = options.repetitions
    if options.metrics is not None:
        update["metrics"] = options.metrics
    return loaded.scenario.model_copy(update=update) if update else loaded.scenario


class ScenarioRun:
    """One run of a scenario: its run directory, its cells, and the results at the end.

        with ScenarioRun(load_scenario("scenarios/smoke.yaml"), RunOptions()) as run:
            for cell in run.cells: run.run_cell(cell)
        result = run.finish()

    Leaving the `with` block, also by an exception, closes the profile (`close()`, safe twice).
    """

    def __init__(self, loaded: LoadedScenario, options: RunOptions | None = None):
        self.options = options or RunOptions()
        if self.options.profile not in ("local", "lab"):
            raise TestbedError(f"profile {self.options.profile!r}: local or lab")
        if self.options.profile == "lab" and self.options.lab is None \
                and self.options.profile_factory is None:
            raise TestbedError("the lab profile needs an inventory (-i INVENTORY)")
        self.loaded = loaded
        self.scenario = effective(loaded, self.options)
        check_options(self.scenario.engine, self.options.jobs, self.options.dask)
        self.cells = expand(self.scenario, loaded.testbed)
        # compiled once: each cell's clock, profiles and resolved policies (testbed.scenario.cellplan)
        plans = RunCompiler(loaded.base_dir).plans(self.cells)
        self.plans = {c.index: p for c, p in zip(self.cells, plans, strict=True)}
        if self.scenario.engine == "testbed" and self.options.profile == "local":
            require_root("a testbed scenario")
            if self.scenario.metrics == "prometheus":
                find_prometheus()  # before the run directory and the first testbed
            flows = any(x.flows for c in self.cells for x in c.scenario.cross_traffic)
            if flows and shutil.which("iperf3") is None:
                raise MissingRequirement("the scenario's cross_traffic needs iperf3 on PATH "
                                         "(apt-get install iperf3; scripts/setup does)")
        require_free_space(self.options.out_root)
        self.console = self.options.console or Console(stderr=True, emoji=False)
        # the lab's --check prints a plan: its directory is named and marked one (plan.json, no
        # results.json), so nothing reads its stand-in cells as a run that lost its requests
        self.plan = bool(getattr(self.options.lab, "check", False))
        self.run_dir = self.options.run_dir or new_run_dir(
            self.options.out_root, f"{self.scenario.name}-plan" if self.plan else self.scenario.name)
        o = self.options
        write_manifest(self.run_dir, scenario=self.scenario.model_dump(mode="json"),
                       testbed=loaded.testbed.model_dump(mode="json"), source=loaded.source,
                       base_dir=loaded.base_dir, profile=o.profile,
                       overrides={k: v for k, v in (("time_scale", o.time_scale),
                                                    ("replica_work", o.replica_work),
                                                    ("duration_s", o.duration_s),
                                                    ("repetitions", o.repetitions))
                                  if v is not None})
        self.problems: list[str] = []
        self.interrupted = False
        self.profile: Profile | None = None
        if self.scenario.engine == "testbed":
            self.profile = self._make_profile()

    def _make_profile(self) -> Profile:
        if self.options.profile_factory is not None:
            return self.options.profile_factory(self)
        if self.options.profile == "local":
            return LocalProfile()
        # the lab's Kubernetes, Prometheus and UE-host clients: only a lab run loads them
        from testbed.scenario.lab import LabProfile

        return LabProfile(self.options.lab, self.scenario, self.loaded.testbed,
                          self.loaded.base_dir, self.run_dir)

    def __enter__(self) -> ScenarioRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Undo what the profile holds for the run (the lab: units, replicas, shaping)."""
        if self.profile is not None:
            problems = self.profile.close() or []
            self.profile = None
            for p in problems:
                self.problems.append(f"cleanup: {p}")

    def run_cell(self, cell: Cell, view: LiveView | None = None) -> list[str]:
        """Every repetition of one cell; returns the problems it recorded.

        cell: the matrix cell; view: the live view, if any."""
        view = view or LiveView(self.console, [cell], self.scenario.repetitions, enabled=False)
        problems: list[str] = []
        for rep in range(self.scenario.repetitions):
            celldir = CellDir.create(self.run_dir, cell.slug, rep)
            try:
                if self.scenario.engine == "sim":
                    problems += SimCellRunner(cell, rep, celldir, self.loaded.base_dir, view).run()
                else:
                    problems += CellRunner(self.plans[cell.index], rep, celldir, view,
                                           self.profile).run()
            except KeyboardInterrupt:
                self.interrupted = True
                raise
        self.problems += problems
        return problems

    @property
    def tasks(self) -> list[tuple[Cell, int]]:
        """Every (cell, repetition), in order."""
        return [(c, rep) for c in self.cells for rep in range(self.scenario.repetitions)]

    @property
    def asked_parallel(self) -> bool:
        """Whether the options ask for parallel cells: a Dask cluster, or more than one process."""
        tasks = len(self.cells) * self.scenario.repetitions
        return bool(self.options.dask) or workers(self.options.jobs, tasks) > 1

    @property
    def parallel(self) -> bool:
        """Whether the cells run in parallel: asked for, and long enough to pay (`too_short`)."""
        return self.asked_parallel and too_short(self.tasks) is None

    def start_pool(self) -> ProcessPoolExecutor | None:
        """The process pool of a parallel run on this machine, started now (before the live view's
        thread: `testbed.scenario.sweep.start_pool`); None for any other run."""
        if not self.parallel or self.options.dask:
            return None
        return start_pool(self.tasks, self.options.jobs)

    def run_parallel(self, view: LiveView | None = None,
                     pool: ProcessPoolExecutor | None = None) -> None:
        """Every repetition of every `engine: sim` cell at once (`--jobs`, `--dask`), each cell's
        files written here as it finishes; KeyboardInterrupt marks the run interrupted and
        propagates once the workers are stopped.

        view: the live view, told of each finished cell; pool: `start_pool`'s, if started."""
        tasks = self.tasks
        view = view or LiveView(self.console, self.cells, self.scenario.repetitions, enabled=False)
        where = (f"the Dask cluster at {self.options.dask}" if self.options.dask else
                 f"{workers(self.options.jobs, len(tasks))} processes")
        view.log(f"{len(tasks)} cell repetitions on {where}")

        def done(i: int, files: dict[str, Any]) -> None:
            cell, rep = tasks[i]
            write_cell_files(CellDir.create(self.run_dir, cell.slug, rep), files)
            view.finished(cell, rep)
        try:
            if self.options.dask:
                run_on_dask(tasks, self.loaded.base_dir, self.options.dask, done)
            else:
                run_in_pool(tasks, self.loaded.base_dir, self.options.jobs, done, pool)
        except KeyboardInterrupt:
            self.interrupted = True
            raise

    def finish(self) -> RunResult:
        """Close the run, judge its rows and write its record (results.json); a --check run writes its
        plan instead."""
        self.close()
        if self.plan:
            return self._finish_plan()
        rows = run_rows(self.run_dir)
        outcomes = evaluate_all(self.scenario.expect, rows) if not self.interrupted else []
        (self.run_dir / RECORD).write_text(json.dumps(
            {"rows": rows, "expect": [asdict(o) for o in outcomes],
             "interrupted": self.interrupted, "problems": self.problems}, indent=1, default=str))
        return RunResult(self.run_dir, rows, outcomes, self.interrupted, self.problems)


    def _finish_plan(self) -> RunResult:
        """A --check run: plan.json instead of results.json, and no cell directories (the
        stand-ins' empty outputs); the plan's actions are in plan.txt (testbed.scenario.lab)."""
        cells = sorted(p.name for p in (self.run_dir / "cells").glob("*")) \
            if (self.run_dir / "cells").is_dir() else []
        shutil.rmtree(self.run_dir / "cells", ignore_errors=True)
        (self.run_dir / "plan.json").write_text(json.dumps(
            {"plan": True, "note": "a --check plan: nothing ran on the lab and nothing was "
             "measured (no results.json)", "cells": cells, "interrupted": self.interrupted,
             "problems": self.problems}, indent=1))
        return RunResult(self.run_dir, [], [], self.interrupted, self.problems)


def run_scenario(loaded: LoadedScenario, options: RunOptions | None = None) -> RunResult:
    """Every cell and repetition with a live view, then results and expectations (the caller writes
    the report: `testbed.report.write_report(result.run_dir)`).

    loaded: the scenario as loaded; options: overrides, profile, output folder, --jobs/--dask."""
    with ScenarioRun(loaded, options) as run:
        pool = run.start_pool()  # forked before the live view's thread starts
        try:
            with LiveView(run.console, run.cells, run.scenario.repetitions,
                          enabled=run.options.progress) as view:
                if run.parallel:
                    with contextlib.suppress(KeyboardInterrupt):  # recorded: run.interrupted
                        run.run_parallel(view, pool)
                else:
                    if run.asked_parallel:
                        view.log(str(too_short(run.tasks)))
                    _run_in_turn(run, view)
        finally:
            if pool is not None:  # run_parallel shut it down; not if the view failed first
                pool.shutdown(wait=False, cancel_futures=True)
    return run.finish()


def _run_in_turn(run: ScenarioRun, view: LiveView) -> None:
    for cell in run.cells:
        try:
            run.run_cell(cell, view)
        except KeyboardInterrupt:
            break
