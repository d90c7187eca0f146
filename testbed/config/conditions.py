"""Link conditions over time: a trace of capacity, loss and delay for the link, a slice or a UE group.

A trace is a CSV file with a header and one row per step (docs/dataplane.md):

    time_s,capacity_mbit,loss,delay_ms
    0,50,0,
    10,10,0.02,

From `time_s` on (scenario time: a run divides it by its time scale) the target has that
capacity (Mbit/s: the link's capacity, a slice's ceiling, a UE group's AMBR, both directions),
that uplink loss (a share, 0 <= loss < 1) and that one-way delay (ms; the link only, and only where
the kernel has netem). An empty cell, or a column left out, keeps the value before. Relative
paths are read from the folder of the YAML file that names them.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

COLUMNS = ("time_s", "capacity_mbit", "loss", "delay_ms")
MAX_STEPS = 100_000


class ConditionStep(BaseModel):
    """One row of a conditions trace: from `time_s` on, these values (None: unchanged)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    time_s: float = Field(ge=0)
    capacity_mbit: float | None = Field(None, gt=0, le=100_000)
    loss: float | None = Field(None, ge=0, lt=1)
    delay_ms: float | None = Field(None, ge=0, le=10_000)


def read_trace(path: Path) -> list[ConditionStep]:
    """The steps of the CSV file at `path`; ValueError naming file, line and column otherwise."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"conditions trace {path}: {exc.strerror or exc}") from None
    rows = list(csv.reader(text.splitlines()))
    if not rows or rows[0][:1] != ["time_s"]:
        raise ValueError(f"{path}:1: the header must start with time_s (columns: "
                         f"{', '.join(COLUMNS)})")
    header = [h.strip() for h in rows[0]]
    unknown = [h for h in header if h not in COLUMNS]
    if unknown:
        raise ValueError(f"{path}:1: unknown column {unknown[0]!r} (columns: {', '.join(COLUMNS)})")
    steps: list[ConditionStep] = []
    for line, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        values: dict[str, float] = {}
        for name, cell in zip(header, row, strict=False):
            if not cell.strip():
                continue
            try:
                values[name] = float(cell)
            except ValueError:
                raise ValueError(f"{path}:{line}: {name}: not a number: {cell.strip()!r}") from None
            if not math.isfinite(values[name]):
                raise ValueError(f"{path}:{line}: {name}: not a finite number: {cell.strip()!r}")
        if "time_s" not in values:
            raise ValueError(f"{path}:{line}: time_s: missing")
        try:
            steps.append(ConditionStep(**values))
        except ValueError as exc:
            first = exc.errors()[0] if hasattr(exc, "errors") else None  # pydantic's
            where = first["loc"][0] if first else "?"
            msg = first["msg"] if first else str(exc)
            raise ValueError(f"{path}:{line}: {where}: {msg}") from None
        if len(steps) > 1 and steps[-1].time_s <= steps[-2].time_s:
            raise ValueError(f"{path}:{line}: time_s: {steps[-1].time_s:g} is not after the row "
                             f"before ({steps[-2].time_s:g}); rows go forward in time")
        if len(steps) > MAX_STEPS:
            raise ValueError(f"{path}:{line}: more than {MAX_STEPS} steps")
    if not steps:
        raise ValueError(f"{path}: no steps (a header and at least one row)")
    return steps


class ConditionsSpec(BaseModel):
    """A conditions trace and what it applies to: `slice`, `ue_group`, or neither (the link)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: str
    slice: str | None = None
    ue_group: str | None = None
    # the trace's rows, read when the YAML file is loaded (kept in the spec: a recorded testbed
    # replays without the file)
    steps: list[ConditionStep] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict) or data.get("steps") or not isinstance(data.get("trace"), str):
            return data
        path = Path(data["trace"])
        if not path.is_absolute():
            base = (info.context or {}).get("base_dir")
            path = (Path(base) if base else Path.cwd()) / path
        return {**data, "trace": str(path), "steps": read_trace(path)}

    @model_validator(mode="after")
    def _one_target(self) -> ConditionsSpec:
        if self.slice is not None and self.ue_group is not None:
            raise ValueError("a conditions trace applies to the link, one slice or one UE group: "
                             "give slice or ue_group, not both")
        if any(s.delay_ms is not None for s in self.steps) and self.target != "link":
            raise ValueError("delay_ms applies to the whole link only: leave the column out of a "
                             "slice's or UE group's trace")
        return self

    @property
    def target(self) -> str:
        """"link", "slice NAME" or "ue_group NAME"."""
        if self.slice is not None:
            return f"slice {self.slice}"
        if self.ue_group is not None:
            return f"ue_group {self.ue_group}"
        return "link"

    def at(self, time_s: float) -> ConditionStep:
        """The values in force at `time_s` (each column's last value so far; None: never set)."""
        now: dict[str, float | None] = {"capacity_mbit": None, "loss": None, "delay_ms": None}
        for s in self.steps:
            if s.time_s > time_s:
                break
            now.update({k: v for k, v in s.model_dump().items() if k != "time_s" and v is not None})
        return ConditionStep(time_s=time_s, **now)
