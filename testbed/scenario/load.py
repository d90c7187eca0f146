"""Loading a scenario file: the model, its cross-references, its matrix and its `expect:` checks,
all validated before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.config import TestbedSpec, check_testbed
from testbed.config.yamlfile import LocatedYaml, format_path, load_yaml_file, parse_yaml, validate
from testbed.errors import ConfigError
from testbed.profiles import load_profiles
from testbed.scenario.expect_checks import check_expectations, check_selectors_match
from testbed.scenario.matrix import check_matrix, expand
from testbed.scenario.plan import check_power
from testbed.scenario.policy_checks import check_policies, check_share_models
from testbed.scenario.profiles import scenario_profiles
from testbed.scenario.spec import Scenario, read_trace, resolve_testbed, trace_dir
from testbed.scenario.spec_checks import check_scenario


class LoadedScenario:
    """A validated scenario with where it came from (for relative paths and error lines)."""

    def __init__(self, scenario: Scenario, testbed: TestbedSpec, doc: LocatedYaml, base_dir: Path):
        self.scenario = scenario
        self.testbed = testbed
        self.doc = doc
        self.base_dir = base_dir

    @property
    def source(self) -> str:
        """The file (or string source) the scenario came from."""
        return self.doc.source

    def raw(self) -> dict[str, Any]:
        """The scenario's YAML as read, before validation (the manifest records it)."""
        return self.doc.data


def scenario_from_yaml(doc: LocatedYaml, base_dir: Path,
                       overrides: dict[str, Any] | None = None) -> LoadedScenario:
    """A LoadedScenario from parsed YAML, every problem a ConfigError naming file, line and field.
    doc: the YAML with its lines; base_dir: where relative paths start; overrides: top-level
    fields replaced first (the CLI's --duration and the like).

    The LoadedScenario's `base_dir` is made absolute here, once: every path the scenario names
    (testbed, traces_dir, service_profiles, models, `module:Class` policies) is joined to it, so a
    worker started in another directory (a process pool's, a Dask worker's) reads the same files.
    The checks before it name the files as the scenario spells them."""
    data = dict(doc.data) if isinstance(doc.data, dict) else doc.data
    if overrides and isinstance(data, dict):
        data.update(overrides)
        doc = LocatedYaml(data, doc.lines, doc.source)
    scn = validate(Scenario, doc)
    try:
        testbed = resolve_testbed(scn, base_dir)
    except ConfigError as exc:
        if isinstance(scn.testbed, str):
            raise
        raise ConfigError([doc.problem(("testbed",), p.message) for p in exc.problems]) from None
    problems = check_scenario(scn, testbed, base_dir)
    problems += check_matrix(scn, testbed)
    problems += check_expectations(scn, [s.name for s in testbed.slices])
    if not problems:
        problems += _check_cells(scn, testbed, base_dir)
    if problems:
        raise ConfigError([doc.problem(path, msg) for path, msg in problems])
    _check_traces(scn, base_dir)
    return LoadedScenario(scn, testbed, doc, Path(base_dir).resolve())


def _check_traces(scn: Scenario, base_dir: Path) -> None:
    """Read every client's trace now, so a malformed one fails before a testbed is built; its
    errors name the trace file and line."""
    for path in sorted({trace_dir(scn, base_dir) / c.trace for c in scn.clients if c.trace}):
        read_trace(scn, path)


def load_scenario(path: str | Path, overrides: dict[str, Any] | None = None) -> LoadedScenario:
    """The scenario file at `path`, validated and checked (`scenario_from_yaml`); overrides: top-
    level fields replaced first."""
    p = Path(path)
    return scenario_from_yaml(load_yaml_file(p), p.parent, overrides)


def parse_scenario(text: str, source: str = "<string>", base_dir: Path | None = None
                   ) -> LoadedScenario:
    """A scenario from YAML `text`; source: its name in errors; base_dir: where its relative paths
    start (default: the working directory)."""
    return scenario_from_yaml(parse_yaml(text, source), base_dir or Path.cwd())


def _check_cells(scn: Scenario, testbed: TestbedSpec, base_dir: Path) -> list[tuple[tuple, str]]:
    """Rules that hold per matrix cell: the initial replicas fit the resource units, inss/ddpg
    models fit the services that use them, each `expect:` term matches some cell's results."""
    problems: list[tuple[tuple, str]] = []
    seen: set[tuple[tuple, str]] = set()
    cells = expand(scn, testbed)
    problems += check_selectors_match(scn, cells)
    if not problems:
        problems += check_power(scn, cells, base_dir)
    profiles: dict[str | None, Any] = {}  # per profile file a matrix may sweep
    for cell in cells:
        own = cell.scenario.service_profiles
        if own not in profiles:
            profiles[own] = load_profiles(base_dir / own if own else None)
        try:
            changed = scenario_profiles(cell.scenario, base_dir, profiles[own])
        except ConfigError as exc:
            swept = [k for k in cell.params if k.startswith("profiles.")]
            where = ("matrix", swept[0]) if swept else ("profiles",)
            problem = exc.problems[0]
            problems.append((where, f"cell {cell.label}: {problem.field}: {problem.message}"
                             if cell.params else f"{problem.field}: {problem.message}"))
            continue
        for path, msg in [*check_policies(cell.scenario, base_dir, cell.params, changed),
                          *check_share_models(cell.scenario, base_dir, cell.params)]:
            if (path, msg) not in seen:
                seen.add((path, msg))
                problems.append((path, f"cell {cell.label}: {msg}" if cell.params else msg))
        for path, msg in check_testbed(cell.testbed) if cell.params else []:
            problems.append((("matrix",), f"cell {cell.label}: testbed.{format_path(path)}: {msg}"))
        units = sum(s.replicas for s in cell.scenario.services)
        if cell.scenario.engine == "testbed" and units > cell.scenario.total_units:
            problems.append((("total_units",), f"cell {cell.label}: initial replicas need "
                             f"{units} units, only {cell.scenario.total_units} exist"))
    return problems
