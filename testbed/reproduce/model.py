"""What a reproduction was asked to do (`Options`) and what it found (`Verdict`, `ReproResult`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.reproduce.tables import TableResult
from testbed.scenario.expect import FAIL, PASS, Outcome


@dataclass
class Options:
    quick: bool = False
    out: Path | None = None
    traces_dir: Path = Path("../shared/traces")
    models_dir: Path = Path("models")
    rule_only: bool = False
    seed: int = 0
    t54_duration_s: float | None = None
    t54_repetitions: int | None = None
    t54_start_s: int | None = None  # seconds into the test day; default T54_START_S
    progress: Callable[[str], None] = print
    show_runs: bool = True  # live view of scenario runs


@dataclass
class Verdict:
    artefact: str
    title: str
    verdict: str  # PASS, FAIL or UNDECIDED: not decided at this size (not a failure)
    summary: str
    details: list[str] = field(default_factory=list)
    table: TableResult | None = None
    slicing: dict[str, Any] | None = None
    run_dir: str | None = None
    seconds: float = 0.0
    decided_by: str = ""  # UNDECIDED: the size that decides it
    outcomes: list[Outcome] = field(default_factory=list)  # Figs 5.7/5.8: the judge's checks

    @property
    def passed(self) -> bool:
        return self.verdict == PASS


@dataclass
class ReproResult:
    out: Path
    verdicts: list[Verdict]
    seconds: float

    @property
    def failed(self) -> bool:
        """Some artefact FAILed; one not decided at this size is not a failure."""
        return any(v.verdict == FAIL for v in self.verdicts)


