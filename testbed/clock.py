"""A run's time scale as one object: how scenario time and wall time convert, and what a time
scale compresses in a request's latency (the emulated replica's own time only). Every part that
times a local run (the cell, the balancer, the Prometheus reader, the replicas, the conditions
replay, the results) converts through a `ScenarioClock` and multiplies by nothing itself
(DESIGN.md, "Pace and the clock"). `PollClock` is the other clock a blocking poll needs: where it
reads the time and how it waits, which check mode swaps for a virtual one."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ScenarioClock:
    """Scenario time runs `scale` times faster than wall time (1: real time)."""

    scale: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"a time scale must be a positive number, got {self.scale!r}")

    @classmethod
    def of_cell(cls, info: Mapping[str, Any]) -> ScenarioClock:
        """The clock a cell ran at, from its cell.json (`time_scale`; real time where absent)."""
        return cls(float(info.get("time_scale") or 1.0))

    def whole_ms_second(self) -> ScenarioClock:
        """The nearest clock whose scenario second lasts a whole number of wall milliseconds
        (16 -> 1000/62): what a Prometheus scrape interval, in whole ms, can keep in step with."""
        return ScenarioClock(1000.0 / max(round(1000.0 / self.scale), 1))

    @property
    def real_time(self) -> bool:
        """Scenario time is wall time."""
        return self.scale == 1

    def wall(self, scenario_s: float) -> float:
        """The wall seconds (or ms) `scenario_s` scenario seconds (or ms) take."""
        return scenario_s / self.scale

    def scenario(self, wall_s: float) -> float:
        """The scenario seconds (or ms) `wall_s` wall seconds (or ms) stand for."""
        return wall_s * self.scale

    def wall_rate(self, per_scenario_s: float) -> float:
        """A rate per scenario second as a rate per wall second."""
        return per_scenario_s * self.scale

    def scenario_ms_of(self, record: Mapping[str, Any]) -> float:
        """A recorded request's latency in scenario time: only the emulated replica's own time
        (`server_ms`) was compressed, so it counts `scale` times, the rest (network, balancer,
        client) at its real duration. Without `server_ms` (a real service) all of it scales.

        record: a request record as its JSON line reads."""
        latency = record["latency_ms"]
        server = record.get("server_ms")
        if server is None or self.scale == 1:
            return latency * self.scale
        return latency + server * (self.scale - 1)

    def compresses(self, latency_ms: float, server_ms: float | None) -> bool:
        """Whether a latency measured in wall time (`latency_ms`, of which `server_ms` the
        emulated replica's own) needs `compressed`: at a time scale, with a replica's time in it."""
        return server_ms is not None and self.scale != 1 and server_ms <= latency_ms

    def compressed(self, latency_ms: float, server_ms: float) -> float:
        """`latency_ms` (wall) on the compressed scale the balancer judges against `wall(slo)`:
        the replica's part as it is, the rest (at its real duration) divided by the scale."""
        return server_ms + (latency_ms - server_ms) / self.scale

    def placed(self, due: float, arrived: float) -> tuple[float, float]:
        """Where a request that arrived at `arrived` lies on an emulated replica's compressed
        schedule, and how long its answer is held after that schedule's end (monotonic s; `due`:
        when its client was due to send it). At a time scale it arrives that long after `due`
        compressed by the scale: its path's real duration (the client, the network, the balancer)
        then counts once, at that duration, in its latency, and the path's jitter (a fraction of
        a millisecond, `scale` times that in scenario time) no longer spaces the arrivals unevenly
        in a queue. The answer is held by what the compression took off, so that the client,
        counting the replica's time `scale` times and the rest at its real duration, finds the
        path's own. In real time, or with a `due` not before the arrival: as it arrived."""
        if self.real_time or not math.isfinite(due) or due >= arrived:
            return arrived, 0.0
        placed = due + self.wall(arrived - due)
        return placed, arrived - placed

    def argv(self) -> list[str]:
        """The command-line option that carries this clock to a replica process."""
        return ["--time-scale", repr(self.scale)]


REAL_TIME = ScenarioClock(1.0)  # scenario time is wall time (the default of every part)


@dataclass(frozen=True)
class PollClock:
    """A blocking poll's time (`monotonic`, seconds that never go back) and its wait (`sleep`):
    wall time, or check mode's virtual clock, whose sleeps advance it (testbed.lab.plan)."""

    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


WALL_TIME = PollClock()  # time.monotonic and time.sleep
