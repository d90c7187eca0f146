"""Read `DURATION COUNT` trace files and turn them into evenly spread request arrival times."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from testbed.errors import ConfigError, ConfigProblem


@dataclass(frozen=True)
class Trace:
    """A request-count trace: interval i lasts durations[i] seconds and holds counts[i] requests."""

    name: str
    durations: np.ndarray  # float64 seconds
    counts: np.ndarray  # float64 requests (before the client's ratio)

    @property
    def seconds(self) -> float:
        return float(self.durations.sum())

    @property
    def max_rate(self) -> float:
        return float((self.counts / self.durations).max()) if len(self.counts) else 0.0

    @classmethod
    def constant(cls, rate: float, seconds: int, name: str = "constant") -> Trace:
        """A synthetic trace of `rate` requests in every second (tests, closed-form cases)."""
        return cls(name, np.ones(seconds), np.full(seconds, float(rate)))


def read_trace(path: str | Path) -> Trace:
    """Parse a trace file; a malformed line raises ConfigError naming file and line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError([ConfigProblem(str(path), None, "", f"cannot read trace: {exc.strerror}")]) from exc
    durations: list[float] = []
    counts: list[float] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        try:
            if len(fields) != 2:
                raise ValueError("expected two numbers: DURATION COUNT")
            duration, count = float(fields[0]), float(fields[1])
            if duration <= 0 or count < 0:
                raise ValueError("duration must be > 0 and count >= 0")
        except ValueError as exc:
            raise ConfigError([ConfigProblem(str(path), lineno, "", str(exc))]) from None
        durations.append(duration)
        counts.append(count)
    if not durations:
        raise ConfigError([ConfigProblem(str(path), None, "", "trace has no intervals")])
    return Trace(path.name, np.asarray(durations), np.asarray(counts))


COUNT_ROUNDING = ("floor", "carry")


def scaled_counts(trace: Trace, ratio: float, rounding: str = "floor") -> np.ndarray:
    """Requests per interval a client sends for `trace` scaled by `ratio`.

    "floor" (default) truncates each interval's count·ratio, as the dissertation's own client does
    (`int(num_requests * req_scaling)` in tu-nv/drafas drl/simpy_env.py; the text of Section
    3.4.2 only says the count is multiplied). At ratio 0.15 this sends about 11 % fewer requests
    than count·ratio on the test day. "carry" floors the running sum instead, so the total
    matches trace·ratio.
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


def arrival_times(trace: Trace, ratio: float, rounding: str = "floor", spacing: str = "ms") -> np.ndarray:
    """All arrival times (s, sorted) of a client replaying `trace` scaled by `ratio`.

    The n requests of an interval (see `scaled_counts`) of d seconds starting at t are spread
    evenly. "ms" (default) as the dissertation's published client does (tu-nv/drafas
    drl/simpy_env.py:236-243): a gap of g = floor(1000·d/n) ms before each request, so they
    arrive at t + k·g for k = 1..n (the last at t + d when n divides 1000·d). "even": at
    t + k·d/n for k = 0..n-1, as the local testbed's load client does.
    """
    if spacing not in ARRIVAL_SPACING:
        raise ConfigError(
            [ConfigProblem("<sim>", None, "spacing", f"{spacing!r}; known: {', '.join(ARRIVAL_SPACING)}")]
        )
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
