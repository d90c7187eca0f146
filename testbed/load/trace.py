"""Request-rate traces (`DURATION COUNT` lines) and the send schedule a client derives from one."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from testbed.config.yamlfile import read_config_text
from testbed.errors import ConfigError, ConfigProblem


@dataclass(frozen=True)
class TraceLine:
    duration: float  # seconds of trace time
    count: float  # requests in that interval before the ratio (whole in files; a cut line keeps a part)


@dataclass(frozen=True)
class Trace:
    lines: tuple[TraceLine, ...]
    source: str = "<trace>"

    @property
    def seconds(self) -> float:
        return sum(line.duration for line in self.lines)

    @property
    def requests(self) -> float:
        return sum(line.count for line in self.lines)


def parse_trace(text: str, source: str = "<trace>") -> Trace:
    """Parse `DURATION COUNT` lines; blank lines and `#` comments are skipped. Every malformed
    line is reported with file and line number."""
    lines: list[TraceLine] = []
    problems: list[ConfigProblem] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.split("#", 1)[0].strip()
        if not stripped:
            continue
        parts = stripped.split()
        if len(parts) != 2:
            problems.append(
                ConfigProblem(source, number, "", f"expected 'DURATION COUNT', got {raw.strip()!r}")
            )
            continue
        try:
            duration = float(parts[0])
        except ValueError:
            problems.append(ConfigProblem(source, number, "duration", f"not a number: {parts[0]!r}"))
            continue
        try:
            count = int(parts[1])
        except ValueError:
            problems.append(ConfigProblem(source, number, "count", f"not an integer: {parts[1]!r}"))
            continue
        if not math.isfinite(duration) or duration <= 0:
            problems.append(ConfigProblem(source, number, "duration", f"must be > 0, got {parts[0]}"))
        elif count < 0:
            problems.append(ConfigProblem(source, number, "count", f"must be >= 0, got {count}"))
        else:
            lines.append(TraceLine(duration, count))
        if len(problems) >= 20:
            break
    if problems:
        raise ConfigError(problems)
    if not lines:
        raise ConfigError([ConfigProblem(source, None, "", "trace has no lines")])
    return Trace(tuple(lines), source)


def load_trace(path: str | Path) -> Trace:
    return parse_trace(read_config_text(path, "trace"), str(path))


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
    t = 0.0
    # Walk the trace as many times as the window needs (a window may wrap past the end).
    while t < end:
        for line in trace.lines:
            a, b = t, t + line.duration
            t = b
            lo, hi = max(a, begin), min(b, end)
            if hi > lo:
                part = (hi - lo) / line.duration
                count = line.count if part >= 1.0 else line.count * part
                out.append(TraceLine(hi - lo, count))
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
    """Offsets (seconds from the run's start, wall time) at which to send requests: each line's
    `count * ratio` requests spread evenly over its `duration / speedup`. Fractions carry over to
    the next line so the total matches the scaled trace."""
    if ratio < 0:
        raise ValueError("ratio must be >= 0")
    if speedup <= 0:
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
