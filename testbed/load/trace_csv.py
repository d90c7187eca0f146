"""Rate traces from CSV: a time or interval column and a rate or count column, their units stated
in the header (or given by the caller), read into the same `Trace` as `DURATION COUNT` lines.

Columns are found by their header names (case and spaces ignored):

- **time** (`time`, `t`, `timestamp`, `start`, `offset`, or a unit's own name: `second`,
  `minute`, `hour`): when each row's interval starts, a number in its unit or an ISO 8601
  timestamp (`2026-11-01T08:05:00Z`, which needs no unit); a row lasts until the next one starts,
  the last row as long as the one before it. Where the rows step regularly, a jump of a whole
  number of steps is a missing row, an error naming its line (else the row before it would
  silently last twice as long).
- **interval** (`duration`, `interval`, `dt`, `length`, `period`): how long each row lasts.
- **rate** (`rate`, `rps`, `rpm`, `qps`, or any name with `per_UNIT` / `/UNIT` / `_rps`):
  requests per time unit.
- **count** (`count`, `requests`, `arrivals`, `n`): whole requests in the row's interval (a
  fraction is an error; a rate may be fractional).

A unit follows the name (`time_min`, `interval_s`, `rate_per_min`, `rate_rps`, `req/s`,
`time [h]`, `rate (1/s)`, `rate [req/min]`), or is the name (`minute`, `rps`), or comes from the
caller (`time_unit=`, `rate_unit=`); a column whose unit is stated nowhere is an error naming the
file, line 1 and the column. Units: ms, s, min, h (and their long names). Comment lines start
with `#`.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from testbed.errors import ConfigError, ConfigProblem

UNITS_S = {"ms": 0.001, "msec": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
           "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
           "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
           "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "hours": 3600.0}
TIME_NAMES = ("time", "t", "timestamp", "start", "offset")
INTERVAL_NAMES = ("duration", "interval", "dt", "length", "period")
COUNT_NAMES = ("count", "counts", "requests", "arrivals", "n")
RATE_NAMES = ("rate", "rps", "rpm", "rph", "qps")
# a rate column's unit as a name or a suffix: requests (or queries) per second, minute, hour
RATE_WORDS = {"rps": 1.0, "qps": 1.0, "rpm": 60.0, "qpm": 60.0, "rph": 3600.0}
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
    """A time unit's seconds; a rate's unit written `1/s`, `req/s`, `requests/min`, `/h` too."""
    text = text.strip().lower()
    if "/" in text:
        what, _, text = text.partition("/")
        if what.strip() not in ("", "1", "r", "req", "reqs", "request", "requests", "q", "queries"):
            return None
    return UNITS_S.get(text.strip())


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
    per = re.search(r"(?:^per_|_per_|/|_p)(ms|msec|s|sec|second|min|minute|h|hr|hour)s?$", name)
    word = re.search(r"(?:^|_)(rps|qps|rpm|qpm|rph)$", name)
    if per or word or name in RATE_NAMES or name.startswith("rate"):
        unit = stated
        if per:
            unit = UNITS_S[per.group(1)]
        elif word:
            unit = RATE_WORDS[word.group(1)]
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
    data = rows[1:]
    stamped = tcol.role == "time" and bool(data) and _is_timestamp(_cell(data[0][1], tcol))
    t_unit = 1.0 if stamped else _time_unit(tcol, time_unit, problem)
    r_unit = _rate_unit(vcol, rate_unit, problem) if vcol.role == "rate" else None
    times, values, lines = _read_rows(data, source, tcol, vcol, stamped)
    if not times:
        raise problem("", "trace has a header and no rows")
    durations = _durations(np.asarray(times) * t_unit, tcol, lines, problem)
    v = np.asarray(values)
    counts = v * durations / r_unit if r_unit is not None else v
    return durations, counts


def _time_unit(tcol: Column, time_unit: str | None, problem: Callable[..., ConfigError]) -> float:
    """Seconds per unit of the time (or interval) column: its header's, else the caller's."""
    t_unit = tcol.unit_s
    if t_unit is None and time_unit:
        t_unit = caller_unit(time_unit, "time")
    if t_unit is None:
        raise problem(tcol.name, f"the {tcol.role} column {tcol.name!r} states no unit: name it "
                      f"{tcol.name}_s, {tcol.name}_min, {tcol.name}_h (or `{tcol.name} [min]`), "
                      "or give the time unit (a scenario's `trace_units: {time: min}`, a "
                      "command's --trace-time-unit min)")
    return t_unit


def _rate_unit(vcol: Column, rate_unit: str | None, problem: Callable[..., ConfigError]) -> float:
    """Seconds per unit of the rate column's time: its header's, else the caller's."""
    r_unit = vcol.unit_s
    if r_unit is None and rate_unit:
        r_unit = caller_unit(rate_unit, "rate")
    if r_unit is None:
        raise problem(vcol.name, f"the rate column {vcol.name!r} states no unit: name it "
                      "rate_per_s, rate_per_min, rate_rps (or `rate [req/min]`), or give the "
                      "rate unit (a scenario's `trace_units: {rate: per_min}`, a command's "
                      "--trace-rate-unit per_min)")
    return r_unit


def _durations(t: np.ndarray, tcol: Column, lines: list[int],
               problem: Callable[..., ConfigError]) -> np.ndarray:
    """Each row's length in seconds: an interval column's own, or a time column's gaps (the last
    row as long as the one before), checked to increase without a missing row."""
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
    if tcol.role == "time":
        missing = _missing_row(durations[:-1])
        if missing is not None:
            k, step = missing
            raise problem(tcol.name, f"the rows step {_seconds(step)} and this one comes "
                          f"{_seconds(durations[k])} after the one before: a missing row? write it "
                          "(0 if it had no requests), or give an interval column for rows of "
                          "other lengths", lines[k + 1])
    return durations


def _cell(raw: str, col: Column) -> str:
    cell = next(csv.reader(io.StringIO(raw)))
    return cell[col.index].strip() if col.index < len(cell) else ""


def _is_timestamp(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return _timestamp(text) is not None
    return False


def _timestamp(text: str) -> float | None:
    """Epoch seconds of an ISO 8601 timestamp, None if it is not one. A trailing `Z` is UTC; one
    without a zone is read as UTC too, so that the machine's time zone (and its summer time)
    never changes a row's length."""
    try:
        when = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def _read_rows(data: list[tuple[int, str]], source: str, tcol: Column, vcol: Column,
               stamped: bool) -> tuple[list[float], list[float], list[int]]:
    """(times, values, line numbers) of the data rows; every bad cell a ConfigProblem (the
    first MAX_PROBLEMS), raised together."""
    times, values, lines = [], [], []
    problems: list[ConfigProblem] = []
    for number, raw in data:
        got = []
        for col in (tcol, vcol):
            text_value = _cell(raw, col)
            if col is tcol and stamped:
                stamp = _timestamp(text_value)
                got.append(math.nan if stamp is None else stamp)
                if stamp is None:
                    problems.append(ConfigProblem(source, number, col.name, "expected an ISO 8601 "
                                                  f"timestamp as in the first row, got {text_value[:30]!r}"))
                continue
            try:
                value = float(text_value)
            except ValueError:
                value = math.nan
            if not math.isfinite(value) or value < 0:
                problems.append(ConfigProblem(source, number, col.name,
                                              f"expected a number >= 0, got {text_value[:20]!r}"))
            elif col.role == "count" and value != math.floor(value):
                problems.append(ConfigProblem(source, number, col.name, "a count is whole requests, "
                                              f"got {text_value[:20]!r} (a rate column may be fractional)"))
            got.append(value)
        times.append(got[0])
        values.append(got[1])
        lines.append(number)
        if len(problems) >= MAX_PROBLEMS:
            break
    if problems:
        raise ConfigError(problems)
    return times, values, lines


def _missing_row(gaps: np.ndarray) -> tuple[int, float] | None:
    """(index, step) of the first gap that is a whole number (2 or more) of the rows' regular
    step, where most gaps are that step; None for irregular rows or none missing."""
    if len(gaps) < 3:
        return None
    values, counts = np.unique(np.round(gaps, 6), return_counts=True)
    step = float(values[np.argmax(counts)])
    if counts.max() * 2 < len(gaps) or step <= 0:
        return None  # no regular step: rows of their own lengths
    ratio = gaps / step
    jumps = np.flatnonzero((ratio > 1.5) & (np.abs(ratio - np.round(ratio)) < 1e-6))
    return (int(jumps[0]), step) if len(jumps) else None


def _seconds(x: float) -> str:
    return f"{x:g} s" if x < 120 else f"{x / 60:g} min"

