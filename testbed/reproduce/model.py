"""What a reproduction was asked to do (`Options`) and what it found (`Verdict`, `ReproResult`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.reproduce.tables import TableResult


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
    passed: bool
    summary: str
    details: list[str] = field(default_factory=list)
    table: TableResult | None = None
    slicing: dict[str, Any] | None = None
    run_dir: str | None = None
    seconds: float = 0.0


@dataclass
class ReproResult:
    out: Path
    verdicts: list[Verdict]
    seconds: float

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)


