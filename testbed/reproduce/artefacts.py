"""The dissertation's artefacts that `testbed reproduce` knows, what each needs, and the checks that
run before anything is started (so bad input writes nothing)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from testbed.errors import ConfigError, ConfigProblem, MissingRequirement
from testbed.net.cmd import require_root
from testbed.profiles.paper import SERVICES, test_day_file
from testbed.scaler.ppo import read_manifest


@dataclass(frozen=True)
class Artefact:
    name: str
    title: str
    kind: str  # "slicing" (testbed), "sim-table" (simulator), "testbed-table" (testbed)
    needs_traces: bool = False
    needs_models: bool = False
    needs_root: bool = False


ARTEFACTS: dict[str, Artefact] = {
    "fig5.7": Artefact("fig5.7", "Fig 5.7: image classification with and without a slice",
                       "slicing", needs_root=True),
    "fig5.8": Artefact("fig5.8", "Fig 5.8: text to speech (and the chatbot statement of Section "
                       "5.3) with and without a slice", "slicing", needs_root=True),
    "table5.1": Artefact("table5.1", "Table 5.1: DRL vs rule v2 in simulation, 8 units, ratios "
                         "0.15/0.4/0.15", "sim-table", needs_traces=True, needs_models=True),
    "table5.2": Artefact("table5.2", "Table 5.2: DRL vs rule v2 in simulation, 8 units, ratios "
                         "0.3/0.8/0.3", "sim-table", needs_traces=True, needs_models=True),
    "table5.3": Artefact("table5.3", "Table 5.3: DRL vs rule v2 in simulation, 128 units, ratios "
                         "2/6/2", "sim-table", needs_traces=True, needs_models=True),
    "table5.4": Artefact("table5.4", "Table 5.4: DRL vs the rule-based scaler on the (local) testbed",
                         "testbed-table", needs_traces=True, needs_models=True, needs_root=True),
}
ALIASES = {"5.7": "fig5.7", "5.8": "fig5.8", "figure5.7": "fig5.7", "figure5.8": "fig5.8",
           "5.1": "table5.1", "5.2": "table5.2", "5.3": "table5.3", "5.4": "table5.4"}


def select(names: list[str]) -> list[Artefact]:
    """The artefacts named (all when none), in the paper's order; unknown names are an error."""
    if not names:
        return list(ARTEFACTS.values())
    wanted: list[str] = []
    for n in names:
        key = n.lower().replace(" ", "").replace("_", "")
        key = ALIASES.get(key, key)
        if key not in ARTEFACTS:
            raise ConfigError([ConfigProblem(
                "testbed reproduce", None, "ARTEFACT",
                f"unknown artefact {n!r}; known: {', '.join(ARTEFACTS)}")])
        if key not in wanted:
            wanted.append(key)
    return [a for k, a in ARTEFACTS.items() if k in wanted]


def trace_files(traces_dir: Path) -> dict[str, Path]:
    """The test day, shifted 0/8/16 h (Section 5.1), per service."""
    return {s: traces_dir / test_day_file(s) for s in SERVICES}


def model_files(models_dir: Path) -> dict[str, Path]:
    return {s: models_dir / f"{s}.zip" for s in SERVICES}


def preflight(artefacts: list[Artefact], *, traces_dir: Path, models_dir: Path,
              rule_only: bool) -> None:
    """Everything the chosen artefacts need, checked before anything runs; one line per error."""
    if any(a.needs_traces for a in artefacts):
        missing = [str(p) for p in trace_files(traces_dir).values() if not p.is_file()]
        if missing:
            raise MissingRequirement(
                f"traces missing: {', '.join(missing)} (the dissertation's test day; "
                f"without --traces the paper's, shipped with testbed, are read)")
    if not rule_only and any(a.needs_models for a in artefacts):
        absent = [m for m in ("torch", "sb3_contrib", "gymnasium") if find_spec(m) is None]
        if absent:  # before minutes of rule-based runs, not at the first DRL cell
            raise MissingRequirement(
                f"the DRL columns need the drl extra ({', '.join(absent)} not installed): "
                f"pip install -e '.[drl]', or run the rule-based side only with --rule-only")
        missing = [s for s, p in model_files(models_dir).items() if not p.is_file()]
        if missing:
            how = "; ".join(f"testbed train {s} --traces {traces_dir} --out {models_dir / s}.zip"
                            for s in missing)
            raise MissingRequirement(
                f"trained models missing: {', '.join(f'{models_dir / s}.zip' for s in missing)} "
                f"(train them: {how}; or run the rule-based side only with --rule-only)")
        _check_models(model_files(models_dir), traces_dir)
    if any(a.needs_root for a in artefacts):
        names = ", ".join(a.name for a in artefacts if a.needs_root)
        require_root(f"testbed reproduce {names} (local testbed runs)")
        if any(a.kind == "slicing" for a in artefacts) and shutil.which("iperf3") is None:
            raise MissingRequirement("iperf3 not found on PATH: Figs 5.7/5.8 need it "
                                     "(apt-get install iperf3)")


def _check_models(models: dict[str, Path], traces_dir: Path) -> None:
    """A model this checkout cannot read (another branch's metadata or observation) is as good as
    missing: say so before anything runs, not when a testbed cell first asks it to act."""

    for service, path in models.items():
        try:
            read_manifest(path)
        except ConfigError as exc:
            detail = str(exc).splitlines()[0]
            raise MissingRequirement(
                f"model {path} cannot be used by this checkout ({detail}); retrain it here: "
                f"testbed train {service} --traces {traces_dir} --out {path}") from None
