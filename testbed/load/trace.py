"""Request-rate traces (`DURATION COUNT` lines, or CSV: `testbed.load.trace_csv`): the one reader,
and the request times that the load client and the simulator derive from a trace (docs/traces.md)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from testbed.config.yamlfile import MAX_TRACE_BYTES, read_config_text
from testbed.errors import ConfigError, ConfigProblem
from testbed.load.trace_csv import looks_like_csv, parse_csv_trace

MAX_PROBLEMS = 20  # a garbage file stops after this many reported lines
MAX_COUNT = 10**7  # requests in one line (the paper's busiest second holds a few hundred)
MAX_DURATION = 7 * 86400.0  # seconds in one line


@dataclass(frozen=True)
class TraceLine:
    """One `DURATION COUNT` line: `count` requests spread over `duration` seconds."""
    duration: float  # seconds of trace time
    count: float  # requests in that interval before the ratio (whole in files; a cut line keeps a part)


@dataclass(frozen=True)
class Trace:
    """A request-count trace: interval i lasts durations[i] seconds and holds counts[i] requests."""

    name: str
    durations: np.ndarray  # float64 seconds
    counts: np.ndarray  # float64 requests (before the client's ratio)

    @property
    def seconds(self) -> float:
        """The trace's length in seconds."""
        return float(self.durations.sum())

    @property
    def requests(self) -> float:
        """Its requests before any ratio."""
        return float(self.counts.sum())

    @property
    def max_rate(self) -> float:
        """Its highest line rate, requests per second (0 for an empty trace)."""
        return float((self.counts / self.durations).max()) if len(self.counts) else 0.0

    def summary(self) -> str:
        """One line to see a wrong unit at once: its name, length, requests and mean and peak
        rates (before any ratio)."""
        seconds = self.seconds
        span = f"{seconds / 3600:.3g} h" if seconds >= 3600 else f"{seconds:.4g} s"
        mean = self.requests / seconds if seconds > 0 else 0.0
        return (f"{self.name}: {span}, {self.requests:,.0f} requests, mean {mean:.3g} req/s, "
                f"peak {self.max_rate:.3g} req/s")

    @property
    def lines(self) -> tuple[TraceLine, ...]:
        """Its lines as TraceLines."""
        return tuple(TraceLine(float(d), float(c)) for d, c in zip(self.durations, self.counts, strict=True))

    @classmethod
    def constant(cls, rate: float, seconds: int, name: str = "constant") -> Trace:
        """A synthetic trace of `rate` requests in every second (tests, closed-form cases).

        rate: requests per second; seconds: the trace's length; name: what it is called."""
        return cls(name, np.ones(seconds), np.full(seconds, float(rate)))

    @classmethod
    def from_lines(cls, lines: list[TraceLine], name: str) -> Trace:
        """A Trace of `lines` (TraceLines) called `name`."""
        return cls(name, np.array([x.duration for x in lines], dtype=float),
                   np.array([x.count for x in lines], dtype=float))

    def window(self, shift_hours: float = 0.0, start: float = 0.0, duration: float | None = None) -> Trace:
        """This trace as `window_trace` cuts it, as a Trace.

        shift_hours: rotate the day by this many hours first; start, duration: the seconds kept
        (None: to the end)."""
        suffix = f" +{shift_hours:g}h" if shift_hours else ""
        return Trace.from_lines(window_trace(self, shift_hours, start, duration), self.name + suffix)


def parse_trace(text: str, source: str = "<trace>") -> Trace:
    """Parse `DURATION COUNT` lines; blank lines and `#` comments are skipped. Every malformed
    line is reported with file and line number (the first MAX_PROBLEMS of them).

    text: the file's text; source: its name in the errors."""
    durations: list[float] = []
    counts: list[float] = []
    problems: list[ConfigProblem] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.split("#", 1)[0].strip()
        if not stripped:
            continue
        parts = stripped.split()
        if len(parts) != 2:
            problems.append(
                ConfigProblem(source, number, "", f"expected 'DURATION COUNT', got {raw.strip()[:40]!r}")
            )
        else:
            problem = _check_line(parts, source, number)
            if problem is None:
                durations.append(float(parts[0]))
                counts.append(float(int(parts[1])))
            else:
                problems.append(problem)
        if len(problems) >= MAX_PROBLEMS:
            break
    if problems:
        raise ConfigError(problems)
    if not durations:
        raise ConfigError([ConfigProblem(source, None, "", "trace has no lines")])
    return Trace(Path(source).name, np.asarray(durations), np.asarray(counts))


def _check_line(parts: list[str], source: str, number: int) -> ConfigProblem | None:
    try:
        duration = float(parts[0])
    except ValueError:
        return ConfigProblem(source, number, "duration", f"not a number: {parts[0][:20]!r}")
    try:
        count = int(parts[1])
    except ValueError:
        return ConfigProblem(source, number, "count", f"not an integer: {parts[1][:20]!r}")
    if not math.isfinite(duration) or duration <= 0 or duration > MAX_DURATION:
        return ConfigProblem(source, number, "duration",
                             f"must be > 0 and at most {MAX_DURATION:g} s, got {parts[0][:20]}")
    if count < 0:
        return ConfigProblem(source, number, "count", f"must be >= 0, got {count}")
    if count > MAX_COUNT:
        return ConfigProblem(source, number, "count", f"must be at most {MAX_COUNT:g}, got {parts[1][:20]}")
    return None


def load_trace(path: str | Path, *, time_unit: str | None = None,
               rate_unit: str | None = None) -> Trace:
    """The trace in the file at `path`: `DURATION COUNT` lines, or CSV (a `.csv` name or a comma
    in its first line; `testbed.load.trace_csv`); an unreadable or malformed file is a ConfigError
    naming it, its line and field.

    time_unit, rate_unit: a CSV's units where its header states none ("s", "min", "h").
    A file read before, unchanged since (its size and modification time), is not parsed again:
    a day of per-second lines takes 0.2 s, and collecting the suite read the same three 29
    times. Each call gets arrays of its own."""
    key = _cache_key(path, time_unit, rate_unit)
    if key is not None and key in _PARSED:
        return _copy(_PARSED[key])
    text = read_config_text(path, "trace", MAX_TRACE_BYTES)
    if looks_like_csv(text, str(path)):
        durations, counts = parse_csv_trace(text, str(path), time_unit=time_unit,
                                            rate_unit=rate_unit)
        trace = Trace(Path(path).name, durations, counts)
    else:
        trace = parse_trace(text, str(path))
    if key is not None:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[key] = _copy(trace)
    return trace


_PARSED: dict[tuple, Trace] = {}  # load_trace's files, by _cache_key
_PARSED_MAX = 32


def _cache_key(path: str | Path, time_unit: str | None, rate_unit: str | None) -> tuple | None:
    try:
        resolved = Path(path).resolve()
        st = resolved.stat()
    except OSError:
        return None  # read_config_text says why, with the file's name
    return (str(resolved), st.st_size, st.st_mtime_ns, time_unit, rate_unit, Path(path).name)


def _copy(trace: Trace) -> Trace:
    return Trace(trace.name, trace.durations.copy(), trace.counts.copy())


def window_trace(
    trace: Trace, shift_hours: float = 0.0, start: float = 0.0, duration: float | None = None
) -> list[TraceLine]:
    """The part of the trace a run replays: rotated left by `shift_hours` (wrapping around, as the
    paper's shifted test days), then from `start` seconds for `duration` seconds (whole trace when
    None). Lines cut by a boundary keep the proportional part of their count."""
    total = trace.seconds
    offset = (shift_hours * 3600.0) % total if total else 0.0
    begin = offset + max(0.0, start)
    end = begin + (total - max(0.0, start) if duration is None else duration)
    out: list[TraceLine] = []
    if end <= begin:
        return out
    pairs = list(zip(trace.durations.tolist(), trace.counts.tolist(), strict=True))
    t = 0.0
    # Walk the trace as many times as the window needs (a window may wrap past the end).
    while t < end:
        for d, c in pairs:
            a, b = t, t + d
            t = b
            lo, hi = max(a, begin), min(b, end)
            if hi > lo:
                part = (hi - lo) / d
                out.append(TraceLine(hi - lo, c if part >= 1.0 else c * part))
            if t >= end:
                break
    return out


def schedule_from_trace(
    trace: Trace,
    ratio: float = 1.0,
    shift_hours: float = 0.0,
    start: float = 0.0,
    duration: float | None = None,
    speedup: float = 1.0,
) -> Iterator[float]:
    """Offsets (seconds from the run's start, wall time) at which the load client sends: each
    line's `count * ratio` requests spread evenly over its `duration / speedup`. Fractions carry
    over to the next line so the total matches the scaled trace.

    trace: the trace; ratio: its counts' multiplier; shift_hours, start, duration: the window, as
    `window_trace` cuts it; speedup: the time-scale factor (wall seconds are trace seconds /
    speedup)."""
    if not ratio >= 0:
        raise ValueError("ratio must be >= 0")
    if not speedup > 0:
        raise ValueError("speedup must be > 0")
    t = 0.0
    carry = 0.0
    for line in window_trace(trace, shift_hours, start, duration):
        span = line.duration / speedup
        wanted = line.count * ratio + carry
        n = int(wanted + 1e-9)
        carry = wanted - n
        for i in range(n):
            yield t + span * i / n
        t += span


def constant_schedule(rate: float, duration: float) -> Iterator[float]:
    """Offsets for a constant request rate (req/s) over `duration` seconds."""
    if rate <= 0:
        return
    n = int(rate * duration + 1e-9)
    for i in range(n):
        yield i / rate


COUNT_ROUNDING = ("floor", "carry")


def scaled_counts(trace: Trace, ratio: float, rounding: str = "floor") -> np.ndarray:
    """Requests per interval the simulator's client sends for `trace` scaled by `ratio`.

    "floor" (default) truncates each interval's count·ratio, as the dissertation's own client does
    (`int(num_requests * req_scaling)` in tu-nv/drafas drl/simpy_env.py; the text of Section
    3.4.2 only says the count is multiplied). At ratio 0.15 this sends about 11 % fewer requests
    than count·ratio on the test day. "carry" floors the running sum instead, so the total
    matches trace·ratio, as `schedule_from_trace` does for the testbed's client.

    trace, ratio: as above; rounding: "floor" or "carry".
    """
    if rounding == "floor":
        return np.floor(trace.counts * ratio + 1e-9).astype(np.int64)
    if rounding == "carry":
        scaled = np.floor(np.cumsum(trace.counts * ratio) + 1e-9)
        return np.diff(scaled, prepend=0.0).astype(np.int64)
    raise ConfigError(
        [ConfigProblem("<sim>", None, "rounding", f"{rounding!r}; known: {', '.join(COUNT_ROUNDING)}")]
    )


ARRIVAL_SPACING = ("ms", "even")


def per_second(trace: Trace) -> Trace:
    """`trace` read line by line of at most one second, as the published client reads its traces
    (they are all one-second lines): a line longer than a second becomes one line per second of
    it, the last one what is left, its whole requests spread over them in turn (a floored
    running sum) and a fraction of a request kept on the last. Lines of a second or less are kept.
    A 5-minute line of 44,850 requests is then the same as the 300 one-second lines of 149 or 150
    that a user would write for it."""
    d, c = trace.durations, trace.counts
    if not len(d) or float(d.max()) <= 1.0 + 1e-9:
        return trace
    pieces = np.maximum(np.ceil(d - 1e-9), 1).astype(np.int64)
    row = np.repeat(np.arange(len(d)), pieces)
    k = (np.arange(row.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)).astype(float)
    length = d[row]
    end = np.minimum(k + 1.0, length)
    whole = np.floor(c[row] + 1e-9)
    counts = np.floor(whole * end / length + 1e-9) - np.floor(whole * k / length + 1e-9)
    last = np.cumsum(pieces) - 1
    counts[last] += c - np.floor(c + 1e-9)  # a line's fraction of a request stays on its last second
    return Trace(trace.name, end - k, counts)


def arrival_times(trace: Trace, ratio: float, rounding: str = "floor", spacing: str = "ms") -> np.ndarray:
    """All arrival times (s, sorted) of the simulator's client replaying `trace` scaled by `ratio`.

    The n requests of an interval (see `scaled_counts`) of d seconds starting at t are spread
    evenly. "ms" (default) as the dissertation's published client does (tu-nv/drafas
    drl/simpy_env.py:236-243): a gap of g = floor(1000·d/n) ms before each request, so they
    arrive at t + k·g for k = 1..n (the last at t + d when n divides 1000·d). "even": at
    t + k·d/n for k = 0..n-1, as the local testbed's load client (`schedule_from_trace`) does.
    The published client's rules ("ms", "floor") are rules of a trace second: a trace of longer
    lines is read one second at a time first (`per_second`), so that a line means the same
    requests in each second whatever its length (a 5-minute line's requests were squeezed into
    its first 269 s at 4x load, then none). "carry" with "even" is the testbed's client, which
    spreads a line over its whole length.

    trace, ratio, rounding: as `scaled_counts` takes them; spacing: "ms" or "even".
    """
    if spacing not in ARRIVAL_SPACING:
        raise ConfigError(
            [ConfigProblem("<sim>", None, "spacing", f"{spacing!r}; known: {', '.join(ARRIVAL_SPACING)}")]
        )
    if spacing == "ms" or rounding == "floor":
        trace = per_second(trace)
    per_interval = scaled_counts(trace, ratio, rounding)
    total = int(per_interval.sum())
    starts = np.cumsum(trace.durations) - trace.durations
    first = np.cumsum(per_interval) - per_interval
    n = np.maximum(per_interval, 1)
    k = np.arange(total) - np.repeat(first, per_interval)
    if spacing == "ms":
        gap_ms = np.floor(1000.0 * trace.durations / n + 1e-9)
        at_ms = np.repeat(np.round(starts * 1000.0), per_interval) + (k + 1) * np.repeat(gap_ms, per_interval)
        return at_ms / 1000.0  # whole milliseconds, so window and rate-limit edges are exact
    spacing_s = np.where(per_interval > 0, trace.durations / n, 0.0)
    return np.repeat(starts, per_interval) + k * np.repeat(spacing_s, per_interval)
