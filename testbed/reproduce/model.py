"""What a reproduction was asked to do (`Options`) and what it found (`Verdict`, `ReproResult`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from testbed.judge.outcome import FAIL, NOT_RUN, PASS, UNDECIDED, Outcome
from testbed.judge.verdict import EXIT_CODES, worst
from testbed.reproduce.tables import Cell, Check, TableResult
from testbed.traces import packaged_traces


@dataclass
class Options:
    quick: bool = False
    out: Path | None = None
    traces_dir: Path = field(default_factory=packaged_traces)  # the paper's, shipped with testbed
    models_dir: Path = Path("models")
    rule_only: bool = False
    seed: int = 0
    t54_duration_s: float | None = None
    t54_repetitions: int | None = None
    t54_start_s: int | None = None  # seconds into the test day; default T54_START_S
    # Table 5.4's time scale: above 1 the replicas sleep their profile's time (replica_work:
    # sleep); "auto": the highest the machine holds now (testbed.scenario.pace.choose_time_scale)
    t54_time_scale: float | str = 1.0
    # how Table 5.4's scaler and reward read each period (testbed.sim.measure.MEASURES): the
    # DRAFAS testbed's Prometheus by default, "harness" the harness's own reading
    t54_measure: str = "drafas"
    # the policy in the paper's rule-based column: rule_v2 (the dissertation's, Section 4.4.2) or
    # rule_v1 (what its published testbed code runs, tu-nv/drafas drl/drl.py:225)
    t54_rule: str = "rule_v2"
    progress: Callable[[str], None] = print
    show_runs: bool = True  # live view of scenario runs


@dataclass
class Verdict:
    artefact: str
    title: str
    verdict: str  # PASS, FAIL, UNDECIDED (the data cannot decide: exit 2) or NOT RUN (this size
    #               is not judged against the figure: listed apart, exit 0)
    summary: str
    details: list[str] = field(default_factory=list)
    table: TableResult | None = None
    slicing: dict[str, Any] | None = None
    run_dir: str | None = None
    seconds: float = 0.0
    decided_by: str = ""  # UNDECIDED / NOT RUN (or a part of it): the size that decides it
    outcomes: list[Outcome] = field(default_factory=list)  # Figs 5.7/5.8: the judge's checks

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    def to_json(self) -> dict[str, Any]:
        """Plain data (verdicts.json, and the resume state of an interrupted reproduce)."""
        d: dict[str, Any] = {k: getattr(self, k) for k in (
            "artefact", "title", "verdict", "summary", "details", "decided_by", "run_dir", "seconds")}
        d["outcomes"] = [asdict(o) for o in self.outcomes]
        if self.table is not None:
            t = self.table
            d["table"] = {"key": t.key, "title": t.title, "oracle": t.oracle, "notes": t.notes,
                          "checks": [asdict(c) for c in t.checks], "decided_by": t.decided_by,
                          "cells": [asdict(c) for c in t.cells]}
        if self.slicing is not None:
            d["slicing"] = self.slicing
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Verdict:
        """The Verdict `to_json` wrote. Plain data only: a shared resume folder runs no code."""
        t = d.get("table")
        table = None if t is None else TableResult(
            t["key"], t["title"], [Cell(**c) for c in t["cells"]], oracle=t["oracle"],
            notes=t["notes"], checks=[Check(**c) for c in t["checks"]], decided_by=t["decided_by"])
        return cls(**{k: d[k] for k in ("artefact", "title", "verdict", "summary", "details",
                                        "decided_by", "run_dir", "seconds")},
                   outcomes=[Outcome(**o) for o in d["outcomes"]], table=table,
                   slicing=d.get("slicing"))


@dataclass
class ReproResult:
    out: Path
    verdicts: list[Verdict]
    seconds: float

    @property
    def failed(self) -> bool:
        """Some artefact FAILed."""
        return any(v.verdict == FAIL for v in self.verdicts)

    def exit_code(self, allow_undecided: bool = False) -> int:
        """1 when an artefact FAILs, 2 when one is UNDECIDED (never a pass; 0 with
        allow_undecided), else 0 (NOT RUN at this size is listed apart, not a failure): the
        exit codes of testbed.judge.verdict, over the artefacts' worst verdict.

        allow_undecided: an UNDECIDED artefact exits 0 (exploration)."""
        verdict = worst(v.verdict for v in self.verdicts)
        if verdict == UNDECIDED and allow_undecided:
            return 0
        return EXIT_CODES[verdict]

    def not_run(self) -> list[str]:
        """'artefact: what this size does not judge' for each artefact with such a part."""
        return [f"{v.artefact}: {v.decided_by}" for v in self.verdicts
                if v.decided_by and (v.verdict == NOT_RUN or v.table is not None)]


