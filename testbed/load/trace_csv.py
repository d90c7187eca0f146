"""Rate traces from CSV: a time or interval column and a rate or count column, their units stated
in the header (or given by the caller), read into the same `Trace` as `DURATION COUNT` lines.

Columns are found by their header names (case and spaces ignored):

- **time** (`time`, `t`, `timestamp`, `start`, `offset`, or a unit's own name: `second`,
  `minute`, `hour`): when each row's interval starts; a row lasts until the next one starts, the
  last row as long as the one before it.
- **interval** (`duration`, `interval`, `dt`, `length`, `period`): how long each row lasts.
- **rate** (`rate`, `rps`, `rpm`, or any name with `per_UNIT` / `/UNIT`): requests per time unit.
- **count** (`count`, `requests`, `arrivals`, `n`): requests in the row's interval.

A unit follows the name (`time_min`, `interval_s`, `rate_per_min`, `time [h]`, `rate (1/s)`), or
is the name (`minute`, `rps`), or comes from the caller (`time_unit=`, `rate_unit=`); a column
whose unit is stated nowhere is an error naming the file, line 1 and the column. Units: ms, s,
min, h (and their long names). Comment lines start with `#`.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass

import numpy as np

from testbed.errors import ConfigError, ConfigProblem

UNITS_S = {"ms": 0.001, "msec": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
           "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
           "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
           "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "hours": 3600.0}
TIME_NAMES = ("time", "t", "timestamp", "start", "offset")
INTERVAL_NAMES = ("duration", "interval", "dt", "length", "period")
COUNT_NAMES = ("count", "counts", "requests", "arrivals", "n")
RATE_NAMES = ("rate", "rps", "rpm", "rph")
MAX_PROBLEMS = 20


@dataclass(frozen=True)
class Column:
    """A header cell read as a role (time, interval, rate, count) with its unit in seconds (None:
    not stated)."""

    index: int
    name: str
    role: str
    unit_s: float | None


def looks_like_csv(text: str, source: str) -> bool:
    """Whether a trace file is CSV: a `.csv` name, or a first line (past comments) with a comma.

    text: the file's text; source: its name."""
    if source.lower().endswith(".csv"):
        return True
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            return "," in line
    return False


def _unit(text: str) -> float | None:
    return UNITS_S.get(text.strip().lower().lstrip("1/").strip())


def caller_unit(text: str, kind: str) -> float:
    """The seconds of the unit `text` a caller gives for a CSV's `kind` ("time" or "rate") column:
    "s", "min", "h", ... (a rate's may be written "per_min" or "/min"); ValueError naming the units
    otherwise."""
    unit = _unit(text.removeprefix("per_").removeprefix("/") if kind == "rate" else text)
    if unit is None:
        known = "ms, s, min, h" if kind == "time" else "per_ms, per_s, per_min, per_h"
        raise ValueError(f"unknown {kind} unit {text!r}: one of {known}")
    return unit


def read_column(index: int, header: str) -> Column | None:
    """The role and unit a header cell names, None for a column no role takes (ignored).

    index: the column's position; header: its header cell."""
    raw = header.strip().lower()
    bracket = re.search(r"[\[(]\s*([^\])]+?)\s*[\])]", raw)
    stated = _unit(bracket.group(1)) if bracket else None
    name = re.sub(r"[\[(].*?[\])]", "", raw).strip().replace(" ", "_").replace("-", "_")
    per = re.search(r"(?:_per_|/|_p)(ms|msec|s|sec|second|min|minute|h|hr|hour)s?$", name)
    if per or name in RATE_NAMES or name.startswith("rate"):
        unit = stated
        if per:
            unit = UNITS_S[per.group(1)]
        elif name in ("rps", "rpm", "rph"):
            unit = {"rps": 1.0, "rpm": 60.0, "rph": 3600.0}[name]
        elif name.startswith("rate_") and _unit(name[5:]) is not None:
            unit = _unit(name[5:])
        return Column(index, header.strip(), "rate", unit)
    if name in UNITS_S and UNITS_S[name] >= 1.0:  # `minute`: the time, in minutes
        return Column(index, header.strip(), "time", UNITS_S[name])
    base, _, suffix = name.rpartition("_")
    for role, names in (("time", TIME_NAMES), ("interval", INTERVAL_NAMES),
                        ("count", COUNT_NAMES)):
        if name in names:
            return Column(index, header.strip(), role, stated)
        if base in names and _unit(suffix) is not None:
            return Column(index, header.strip(), role, _unit(suffix))
    return None


def parse_csv_trace(text: str, source: str = "<trace>", *, time_unit: str | None = None,
                    rate_unit: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(durations in seconds, counts) of a CSV rate trace (module docstring: the columns and
    their units); every problem a ConfigError naming the file, line and column.

    text: the file's text; source: its name in errors; time_unit, rate_unit: the time (or
    interval) column's and the rate column's unit where the header states none ("s", "min",
    ...; a rate's "per_min" works too)."""
    rows = [(n, raw) for n, raw in enumerate(text.splitlines(), start=1)
            if raw.strip() and not raw.lstrip().startswith("#")]
    if not rows:
        raise ConfigError([ConfigProblem(source, None, "", "trace has no lines")])
    header_line, header = rows[0]
    cells = next(csv.reader(io.StringIO(header)))
    columns = [c for c in (read_column(i, h) for i, h in enumerate(cells)) if c is not None]
    when = [c for c in columns if c.role in ("time", "interval")]
    how_many = [c for c in columns if c.role in ("rate", "count")]

    def problem(field: str, message: str, line: int | None = header_line) -> ConfigError:
        return ConfigError([ConfigProblem(source, line, field, message)])

    if len(when) != 1 or len(how_many) != 1:
        raise problem("header", f"expected one time or interval column ({', '.join(TIME_NAMES)}, "
                      f"minute, ...; {', '.join(INTERVAL_NAMES)}) and one rate or count column "
                      f"(rate_per_s, rpm, ...; {', '.join(COUNT_NAMES)}), got {', '.join(cells)!r}")
    tcol, vcol = when[0], how_many[0]
    t_unit = tcol.unit_s
    if t_unit is None and time_unit:
        t_unit = caller_unit(time_unit, "time")
    if t_unit is None:
        raise problem(tcol.name, f"the {tcol.role} column {tcol.name!r} states no unit: name it "
                      f"{tcol.name}_s, {tcol.name}_min, {tcol.name}_h (or `{tcol.name} [min]`), "
                      "or give the time unit (a scenario's `trace_units: {time: min}`, a "
                      "command's --trace-time-unit min)")
    r_unit = None
    if vcol.role == "rate":
        r_unit = vcol.unit_s
        if r_unit is None and rate_unit:
            r_unit = caller_unit(rate_unit, "rate")
        if r_unit is None:
            raise problem(vcol.name, f"the rate column {vcol.name!r} states no unit: name it "
                          "rate_per_s, rate_per_min (or `rate [1/min]`), or give the rate unit (a "
                          "scenario's `trace_units: {rate: per_min}`, a command's "
                          "--trace-rate-unit per_min)")
    times, values, lines = [], [], []
    problems: list[ConfigProblem] = []
    for number, raw in rows[1:]:
        cell = next(csv.reader(io.StringIO(raw)))
        got = []
        for col in (tcol, vcol):
            text_value = cell[col.index].strip() if col.index < len(cell) else ""
            try:
                value = float(text_value)
            except ValueError:
                value = math.nan
            if not math.isfinite(value) or value < 0:
                problems.append(ConfigProblem(source, number, col.name,
                                              f"expected a number >= 0, got {text_value[:20]!r}"))
            got.append(value)
        times.append(got[0])
        values.append(got[1])
        lines.append(number)
        if len(problems) >= MAX_PROBLEMS:
            break
    if problems:
        raise ConfigError(problems)
    if not times:
        raise problem("", "trace has a header and no rows")
    t = np.asarray(times) * t_unit
    if tcol.role == "interval":
        durations = t
        bad = np.flatnonzero(durations <= 0)
    else:
        if len(t) < 2:
            raise problem(tcol.name, "one row of a time column says when it starts, not how long "
                          "it lasts: give two rows or an interval column", lines[0])
        gaps = np.diff(t)
        bad = np.flatnonzero(gaps <= 0) + 1
        durations = np.append(gaps, gaps[-1])
    if len(bad):
        raise problem(tcol.name, "times must increase and intervals be > 0"
                      if tcol.role == "time" else "an interval must be > 0", lines[int(bad[0])])
    v = np.asarray(values)
    counts = v * durations / r_unit if r_unit is not None else v
    return durations, counts

