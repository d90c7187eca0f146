"""A run compiled once before its first cell: per cell, a frozen `CellPlan` with its clock, the
profiles in use and each service's policy resolved, which the cell's runner builds from; each
policy name of the run is resolved once, each profile file read once (DESIGN.md, "Pace and the
clock")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from testbed.clock import ScenarioClock
from testbed.profiles import PACKAGED_PROFILES, ServiceProfile, load_profiles
from testbed.scaler.fa2 import Pipeline
from testbed.scaler.factory import BuiltPolicies, PolicyChoice, build_policies
from testbed.scaler.registry import PolicyEntry, resolve
from testbed.scenario.matrix import Cell
from testbed.scenario.profiles import profile_file, scenario_profiles
from testbed.scenario.spec import Scenario
from testbed.sim.measure import DEFAULT_MEASURE


@dataclass(frozen=True)
class CellPlan:
    """What one cell runs, resolved: its clock, the services' profiles (the registry's, the
    scenario's file and its `profiles:` changes), where they came from, each service's policy
    choice, those policies' registry entries by name, and fa2's pipelines."""

    cell: Cell
    base_dir: Path
    clock: ScenarioClock
    profiles: Mapping[str, ServiceProfile]
    profile_source: str
    choices: tuple[PolicyChoice, ...]
    entries: Mapping[str, PolicyEntry] = field(compare=False, repr=False)
    pipelines: tuple[Pipeline, ...] = ()

    @property
    def scenario(self) -> Scenario:
        """The cell's scenario (its matrix values applied)."""
        return self.cell.scenario

    def policies(self, rep: int) -> BuiltPolicies:
        """Fresh policy objects for repetition `rep` (a policy keeps state through a cell): the
        entries are the plan's, resolved once for the run."""
        scn = self.scenario
        return build_policies(self.choices, self.profiles, total_units=scn.total_units,
                              seed=scn.seed + rep, pipelines=self.pipelines,
                              profile_source=self.profile_source, base_dir=self.base_dir,
                              entries=self.entries)

    def __reduce__(self) -> tuple[Any, ...]:
        # a worker process compiles the cell again: a user's module:Class entry holds a class
        # imported from the scenario's folder, which pickles by a name the worker may not import
        return (compile_cell, (self.cell, self.base_dir))


class RunCompiler:
    """Compiles the cells of one run, resolving each policy name and reading each profile file
    once for all of them."""

    def __init__(self, base_dir: Path):
        self.base_dir = base_dir
        self._entries: dict[str, PolicyEntry] = {}
        self._files: dict[Path | None, dict[str, ServiceProfile]] = {}

    def entry(self, name: str) -> PolicyEntry:
        """The registry's entry for policy `name`, resolved the first time the run names it."""
        if name not in self._entries:
            self._entries[name] = resolve(name, base_dir=self.base_dir)
        return self._entries[name]

    def plan(self, cell: Cell) -> CellPlan:
        """The plan of one cell. A testbed cell read the DRAFAS way runs at the nearest time scale
        whose second is whole wall milliseconds (`ScenarioClock.whole_ms_second`): its Prometheus
        scrapes once a scenario second, in whole ms, and would otherwise drift against it."""
        scn = cell.scenario
        if scn.engine == "testbed" and scn.measure != DEFAULT_MEASURE:
            held = ScenarioClock(scn.time_scale).whole_ms_second().scale
            if held != scn.time_scale:
                scn = scn.model_copy(update={"time_scale": held})
                cell = replace(cell, scenario=scn)
        own = profile_file(scn, self.base_dir)
        if own not in self._files:
            self._files[own] = load_profiles(own)
        profiles = scenario_profiles(scn, self.base_dir, self._files[own])
        choices = tuple(PolicyChoice(s.name, s.policy, self.base_dir / s.model if s.model else None,
                                     s.policy_args) for s in scn.services)
        return CellPlan(
            cell=cell, base_dir=self.base_dir, clock=ScenarioClock(scn.time_scale),
            profiles=profiles, profile_source=str(own) if own else PACKAGED_PROFILES,
            choices=choices, entries={c.policy: self.entry(c.policy) for c in choices},
            pipelines=tuple(Pipeline(tuple(p.services), p.sla_ms) for p in scn.pipelines))

    def plans(self, cells: Sequence[Cell]) -> list[CellPlan]:
        """Every cell's plan, in the cells' order."""
        return [self.plan(c) for c in cells]


def compile_cell(cell: Cell, base_dir: Path) -> CellPlan:
    """One cell's plan on its own (a worker process's).

    cell: the matrix cell; base_dir: the scenario's folder."""
    return RunCompiler(base_dir).plan(cell)
