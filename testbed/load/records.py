"""One record per request, and the JSONL writer that streams them to disk as they complete."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

# Error kinds a record can carry (None when the request succeeded).
_dumps = json.JSONEncoder(separators=(",", ":")).encode

ERROR_KINDS = ("unreachable", "reset", "http_5xx", "http_4xx", "malformed", "timeout", "cancelled", "other")


@dataclass(slots=True)
class RequestRecord:
    """One request as the client saw it: when it was scheduled and sent, its latency (from sending
    and from the schedule), status, bytes and error kind."""
    service: str
    slice: str | None
    seq: int  # order of scheduling within the client
    scheduled: float  # epoch seconds when the schedule said to send
    sent: float  # epoch seconds when the client started sending
    latency_ms: float  # from send to the end of the response (or the error)
    latency_sched_ms: float  # from the scheduled time: includes the client's own lateness
    status: int  # HTTP status, 0 when there was no response
    bytes_up: int  # request body + request target
    bytes_down: int  # response body
    error: str | None = None  # one of ERROR_KINDS
    # an emulated replica's own time for it (wall ms from admission to its answer, the part a time
    # scale compresses), from its X-Testbed-Server-Ms header; None from a real service
    server_ms: float | None = None
    # epoch seconds when the client's schedule handed it to its connections: from `scheduled` to
    # here is the client's own lag; from here to `sent` the wait for a connection (a slice's queue)
    dispatched: float | None = None
    ue_group: str | None = None  # the UE group whose UE sent it (None: not from a testbed UE)
    ue: str | None = None  # the address of the UE that sent it (None: not bound to one)

    @property
    def ok(self) -> bool:
        """Answered without error."""
        return self.error is None

    @property
    def lateness_ms(self) -> float:
        """How late the client sent it after its scheduled time."""
        return (self.sent - self.scheduled) * 1000.0

    def to_json(self) -> str:
        """The record as one JSON line."""
        # field by field rather than dataclasses.asdict (which deep-copies): 3x cheaper per record
        return _dumps({
            "service": self.service, "slice": self.slice, "seq": self.seq,
            "scheduled": round(self.scheduled, 6), "sent": round(self.sent, 6),
            "latency_ms": round(self.latency_ms, 3), "latency_sched_ms": round(self.latency_sched_ms, 3),
            "status": self.status, "bytes_up": self.bytes_up, "bytes_down": self.bytes_down,
            "error": self.error,
            "server_ms": None if self.server_ms is None else round(self.server_ms, 3),
            "dispatched": None if self.dispatched is None else round(self.dispatched, 6),
            "ue_group": self.ue_group, "ue": self.ue,
        })

    @classmethod
    def from_json(cls, line: str) -> RequestRecord:
        """The record one JSON `line` holds."""
        return cls(**json.loads(line))


def schedule_lag_ms(record: Mapping[str, Any]) -> float | None:
    """How far behind its schedule the client handed a recorded request to its connections (wall
    ms): its event loop's lag, which a machine that does not hold a time scale shows, without the
    wait for a connection that a congested slice adds. Records without `dispatched` (written
    before it existed) give the lateness of sending. None without a schedule.

    record: a request record as its JSON line reads."""
    at = record.get("dispatched")
    if at is None:
        at = record.get("sent")
    if at is None or record.get("scheduled") is None:
        return None
    return (at - record["scheduled"]) * 1000.0


class RecordWriter:
    """Appends records as JSON lines; flushes at least every `flush_s` seconds and on close, so
    an interrupted run keeps every record it finished. Use as a context manager."""

    def __init__(self, path: str | Path, flush_s: float = 0.5):
        self.path = Path(path)
        self.flush_s = flush_s
        self.count = 0
        self._fh: IO[str] | None = None
        self._last_flush = 0.0

    def open(self) -> RecordWriter:
        """Open the file for appending (its folder made); returns the writer."""
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("a", encoding="utf-8")
            self._last_flush = time.monotonic()
        return self

    def __call__(self, record: RequestRecord) -> None:
        self.write(record)

    def write(self, record: RequestRecord) -> None:
        """Append `record` as a JSON line."""
        if self._fh is None:
            self.open()
        assert self._fh is not None
        self._fh.write(record.to_json() + "\n")
        self.count += 1
        now = time.monotonic()
        if now - self._last_flush >= self.flush_s:
            self._fh.flush()
            self._last_flush = now

    def close(self) -> None:
        """Flush and close the file."""
        if self._fh is not None:
            self._fh.flush()
            self._fh.close()
            self._fh = None

    def __enter__(self) -> RecordWriter:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: str | Path) -> list[RequestRecord]:
    """The RequestRecords of the JSON-lines file `path`."""
    with Path(path).open(encoding="utf-8") as fh:
        return [RequestRecord.from_json(line) for line in fh if line.strip()]
