"""Reads a JSON-lines file as it grows: the complete lines added since the last read, parsed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

READ_LIMIT = 2 * 2**20  # bytes per read: what one read holds parsed at once is bounded


class JsonlTail:
    """The lines a writer appended to `path` since the last `read()`; a line without its newline
    yet (a writer mid-flush) waits for the next read, and a line that is not JSON is skipped, as
    `testbed.scenario.rundir.read_jsonl` skips one cut short by a crash."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self._rest = b""

    def read(self, limit: int = READ_LIMIT) -> list[dict[str, Any]]:
        """The rows appended since the last read (at most `limit` bytes of them), in order."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return []
        if size < self.offset:  # rewritten from the start (cell.json is; a JSONL file is not)
            self.offset, self._rest = 0, b""
        if size == self.offset:
            return []
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read(min(size - self.offset, limit))
        except OSError:
            return []
        self.offset += len(data)
        *lines, self._rest = (self._rest + data).split(b"\n")
        rows = []
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
        return rows

    @property
    def behind(self) -> bool:
        """Whether the file holds more than has been read (a read was cut at its limit)."""
        try:
            return self.path.stat().st_size > self.offset
        except OSError:
            return False


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file that its writer replaces whole (cell.json, results.json), or None while
    it is missing, half-written or not an object."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
