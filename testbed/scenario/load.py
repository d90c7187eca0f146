"""Loading a scenario file: the model, its cross-references, its matrix and its `expect:` checks,
all validated before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.config import TestbedSpec
from testbed.config.yamlfile import LocatedYaml, load_yaml_file, parse_yaml, validate
from testbed.errors import ConfigError
from testbed.scenario.expect import check_expectations
from testbed.scenario.matrix import check_matrix, expand
from testbed.scenario.spec import Scenario, check_scenario, resolve_testbed


class LoadedScenario:
    """A validated scenario with where it came from (for relative paths and error lines)."""

    def __init__(self, scenario: Scenario, testbed: TestbedSpec, doc: LocatedYaml, base_dir: Path):
        self.scenario = scenario
        self.testbed = testbed
        self.doc = doc
        self.base_dir = base_dir

    @property
    def source(self) -> str:
        return self.doc.source

    def raw(self) -> dict[str, Any]:
        return self.doc.data


def scenario_from_yaml(doc: LocatedYaml, base_dir: Path,
                       overrides: dict[str, Any] | None = None) -> LoadedScenario:
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
    problems += check_expectations(scn)
    if not problems:
        problems += _check_cells(scn, testbed)
    if problems:
        raise ConfigError([doc.problem(path, msg) for path, msg in problems])
    return LoadedScenario(scn, testbed, doc, base_dir)


def load_scenario(path: str | Path, overrides: dict[str, Any] | None = None) -> LoadedScenario:
    p = Path(path)
    return scenario_from_yaml(load_yaml_file(p), p.parent, overrides)


def parse_scenario(text: str, source: str = "<string>", base_dir: Path | None = None
                   ) -> LoadedScenario:
    return scenario_from_yaml(parse_yaml(text, source), base_dir or Path.cwd())


def _check_cells(scn: Scenario, testbed: TestbedSpec) -> list[tuple[tuple, str]]:
    """Rules that hold per matrix cell: the initial replicas fit the resource units."""
    problems: list[tuple[tuple, str]] = []
    for cell in expand(scn, testbed):
        units = sum(s.replicas for s in cell.scenario.services)
        if cell.scenario.engine == "testbed" and units > cell.scenario.total_units:
            problems.append((("total_units",), f"cell {cell.label}: initial replicas need "
                             f"{units} units, only {cell.scenario.total_units} exist"))
    return problems
