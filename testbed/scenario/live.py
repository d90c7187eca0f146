"""The live view of a scenario run: cell, phase, elapsed/remaining, and per service the rate,
latency, SLO violations and replicas of the last few seconds."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from testbed.scenario.matrix import Cell


class LiveView:
    """Written by the cell's thread (`update`, `set_phase`), drawn by rich's refresh thread."""

    def __init__(self, console: Console, cells: list[Cell], repetitions: int, enabled: bool = True):
        self.console = console
        self.total = len(cells) * repetitions
        self.done = 0
        # a live view redraws in place: piped or captured output gets plain lines instead (a
        # redrawn view's last frame would run into whatever is printed after it)
        self.enabled = enabled and console.is_terminal
        self._started = time.monotonic()
        self._cell_started = self._started
        self._cell_walls: list[float] = []  # wall seconds of each finished cell
        self._header = "starting"
        self._rows: list[tuple[str, ...]] = []
        self._notes: list[str] = []
        self._wall: float | None = None
        self._elapsed = 0.0
        self._live: Live | None = None
        self._last_cell: tuple[int, int] | None = None

    def __enter__(self) -> LiveView:
        if self.enabled:
            self._live = Live(self, console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def set_phase(self, cell: Cell, rep: int, phase: str, wall: float | None = None) -> None:
        """Show `phase` ("starting replicas", "running", ...) of repetition `rep` of `cell`; wall: the
        phase's planned seconds, for the progress bar."""
        key = (cell.index, rep)
        if key != self._last_cell:
            now = time.monotonic()
            if self._last_cell is not None:
                self.done += 1
                self._cell_walls.append(now - self._cell_started)
            self._cell_started = now
            self._last_cell = key
            self._rows = []  # the previous cell's services are not this one's
        self._header = f"cell {cell.index + 1} ({cell.label}), rep {rep + 1}: {phase}"
        self._wall = wall
        self._elapsed = 0.0
        if not self.enabled:
            self.console.print(Text(self._header))  # labels hold user values: never markup

    def finished(self, cell: Cell, rep: int) -> None:
        """A repetition of a cell finished elsewhere (a parallel run's worker).

        cell: the matrix cell; rep: its repetition (from 0)."""
        self.done += 1
        self._header = f"cell {cell.index + 1} ({cell.label}), rep {rep + 1}: done"
        if not self.enabled:
            self.console.print(Text(self._header))

    def note(self, text: str) -> None:
        """A line about the run in progress, `text` (printed at once without a live view)."""
        self._notes.append(text)
        if not self.enabled:
            self.console.print(Text(text))

    def log(self, text: str) -> None:
        """A line that stays on screen (above the live view), e.g. a cell's testbed name.

        text: the line."""
        self.console.print(Text(text))

    def update(self, rows: list[tuple[str, Any, int, int]], elapsed: float) -> None:
        """The latest sample: (service, its 5 s WindowMetrics or None, ready, desired) per service.

        rows: those tuples; elapsed: seconds into the cell."""
        self._elapsed = elapsed
        out = []
        for name, w, ready, desired in sorted(rows, key=lambda r: r[0]):
            out.append((name, "–" if w is None else f"{w.request_rate:.1f}",
                        "–" if w is None or w.mean_latency_ms is None
                        else f"{w.mean_latency_ms:.0f}",
                        "–" if w is None else f"{100 * w.slo_violation_rate:.1f} %",
                        f"{ready}/{desired}"))
        self._rows = out

    def tick(self, elapsed: float) -> None:
        """Seconds into the cell, `elapsed`, for the progress bar between samples."""
        self._elapsed = elapsed

    def refresh(self) -> None:
        """Redraw the live view now."""
        if self._live is not None:
            self._live.refresh()

    def run_eta_s(self) -> float | None:
        """Wall seconds left in the whole run: the mean finished cell's time for each cell not yet
        finished, less what this one has run; None before a cell has finished."""
        if not self._cell_walls:
            return None
        per_cell = sum(self._cell_walls) / len(self._cell_walls)
        in_this = time.monotonic() - self._cell_started
        return max(per_cell * (self.total - self.done) - in_this, 0.0)

    def __rich__(self) -> Group:
        progress = f"[{self.done}/{self.total} cells done] "
        timing = ""
        if self._wall:
            timing = (f"  elapsed {self._elapsed:.0f} s, remaining "
                      f"{max(self._wall - self._elapsed, 0):.0f} s (wall)")
        eta = self.run_eta_s()
        if eta is not None:
            timing += f"; whole run ~{eta / 60:.1f} min left"
        table = Table("service", "req/s (scenario time, last 5 s)", "latency ms", "SLO violations",
                      "replicas ready/desired", box=None, pad_edge=False)
        for row in self._rows:
            table.add_row(*row)
        parts: list[Any] = [Text(progress + self._header + timing, style="bold"), table]
        parts += [Text(n, style="yellow") for n in self._notes[-3:]]
        return Group(*parts)
