"""A run's result rows or request records as CSV or JSON lines, for a spreadsheet, pandas or R.

    rows(run_dir)           the rows of RUN_DIR/results.json, as the report and `expect:` read them
    request_rows(run_dir)   every request record of every cell and repetition, with where it ran
    net_rows(run_dir)       every network sample (each cell's net.jsonl: per second, per slice
                            class and UE leaf, both directions) and each link-conditions step
                            applied (conditions.jsonl), with where it ran
    write_csv(rows, out)    a header with the union of the rows' keys (in the order they first
                            appear), nested values as JSON, None as an empty field
    write_jsonl(rows, out)  one JSON object a line

`out` is a path or an open text stream (standard output); a path is written whole or not at all.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from testbed.clock import ScenarioClock
from testbed.errors import StateError
from testbed.scenario.rundir import read_jsonl

FORMATS = ("csv", "jsonl")


def check_run_dir(run_dir: Path) -> Path:
    """`run_dir` itself when it is a run directory (it holds manifest.json), else a StateError
    saying what it is."""
    if not run_dir.exists():
        raise StateError(f"{run_dir}: no such directory")
    if not run_dir.is_dir():
        raise StateError(f"{run_dir} is not a run directory (not a directory)")
    if not (run_dir / "manifest.json").is_file():
        raise StateError(f"{run_dir} is not a run directory (no manifest.json; `testbed run` "
                         "makes one under runs/)")
    return run_dir


def rows(run_dir: Path) -> list[dict[str, Any]]:
    """The result rows of the run directory `run_dir` (its results.json), one per cell,
    repetition and service or slice."""
    check_run_dir(run_dir)
    path = run_dir / "results.json"
    if not path.is_file():
        raise StateError(f"{run_dir}: no results.json (the run did not finish); --requests "
                         "exports the request records it has")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise StateError(f"{path}: not JSON ({exc})") from None
    found = results.get("rows") if isinstance(results, dict) else None
    if not isinstance(found, list) or not all(isinstance(r, dict) for r in found):
        raise StateError(f"{path}: no list of rows under `rows`")
    return found


def request_rows(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Every request record of the run directory `run_dir`, cell by cell, repetition by
    repetition and client by client, each with `cell` (the cell's folder), `rep`, the cell's
    matrix parameters, `client` (the record file's name) and `warmup` (true for a request of the
    scenario's `warmup_s`, which the results leave out) before the record's own fields
    (`service`, `slice`, `seq`, `latency_ms`, ...)."""
    check_run_dir(run_dir)
    reps = [p for p in (run_dir / "cells").glob("*/rep-*") if p.is_dir()]
    for rep_dir in sorted(reps, key=_rep_order):
        info = _cell_info(rep_dir)
        rep = info.get("rep", _rep_order(rep_dir)[1])
        params = info.get("params") or {}
        warmup = info.get("warmup_requests") or {}
        for f in sorted((rep_dir / "requests").glob("*.jsonl")):
            first = warmup.get(f.name, 0)
            for record in read_jsonl(f):
                seq = record.get("seq")
                yield {"cell": rep_dir.parent.name, "rep": rep, **params, "client": f.stem,
                       "warmup": isinstance(seq, int) and seq <= first, **record}


def net_rows(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Every network sample of the run directory `run_dir`, cell by cell and repetition by
    repetition: `cell`, `rep`, the cell's matrix parameters, `series` ("net": a sample of
    net.jsonl; "conditions": a step of conditions.jsonl applied), `t_s` (scenario seconds from
    the cell's load start, where it has one) before the sample's own fields (`t`, `direction`,
    `slice`, `group`, `ue`, `bytes`, `rate_mbit`, `drops`, ...)."""
    check_run_dir(run_dir)
    reps = [p for p in (run_dir / "cells").glob("*/rep-*") if p.is_dir()]
    for rep_dir in sorted(reps, key=_rep_order):
        info = _cell_info(rep_dir)
        rep = info.get("rep", _rep_order(rep_dir)[1])
        params = info.get("params") or {}
        zero = info.get("measure_started") or info.get("load_started")
        clock = ScenarioClock.of_cell(info)
        for series, name in (("net", "net.jsonl"), ("conditions", "conditions.jsonl")):
            path = rep_dir / name
            for sample in read_jsonl(path) if path.is_file() else ():
                t = sample.get("t") if isinstance(sample.get("t"), int | float) else None
                t_s = clock.scenario(t - zero) if t is not None and zero else None
                yield {"cell": rep_dir.parent.name, "rep": rep, **params, "series": series,
                       "t_s": t_s, **sample}


def _rep_order(rep_dir: Path) -> tuple[str, int]:
    number = rep_dir.name.removeprefix("rep-")
    return rep_dir.parent.name, int(number) if number.isdigit() else -1


def _cell_info(rep_dir: Path) -> dict[str, Any]:
    """The repetition's cell.json; empty when it was never written (a run cut short)."""
    path = rep_dir / "cell.json"
    if not path.is_file():
        return {}
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise StateError(f"{path}: not JSON ({exc})") from None
    if not isinstance(info, dict):
        raise StateError(f"{path}: a JSON object is expected")
    return info


def columns(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The union of the keys of `rows`, in the order they first appear."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)


def csv_field(value: Any) -> str:
    """How `value` is written in a CSV field: None empty, booleans and nested values (lists,
    objects) as JSON, numbers as Python prints them (exact for floats), text as it is."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | dict | list | tuple):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def write_csv(rows: Iterable[dict[str, Any]], out: str | Path | IO[str],
              fields: list[str] | None = None) -> int:
    """Write `rows` (dicts) as CSV to `out` (a path, or an open text stream) under a header of
    `fields`, by default the union of the rows' keys (columns); a row lacking a field leaves it
    empty. Returns how many rows were written."""
    rows = list(rows)
    fields = columns(rows) if fields is None else fields
    with _opened(out) as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(fields)
        for row in rows:
            writer.writerow([csv_field(row.get(k)) for k in fields])
    return len(rows)


def write_jsonl(rows: Iterable[dict[str, Any]], out: str | Path | IO[str]) -> int:
    """Write `rows` (dicts) to `out` (a path, or an open text stream), one JSON object a line,
    as they come. Returns how many rows were written."""
    n = 0
    with _opened(out) as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":"), default=str) + "\n")
            n += 1
    return n


WRITERS = {"csv": write_csv, "jsonl": write_jsonl}


def export(run_dir: Path, out: str | Path | IO[str], fmt: str = "csv", *,
           requests: bool = False, net: bool = False) -> int:
    """Write the run directory `run_dir`'s result rows, or with `requests` its request records,
    or with `net` its network samples, to `out` (a path or an open text stream) in the format
    `fmt` (one of FORMATS). Returns how many rows were written; a directory that is not a run's
    is a StateError before `out` is touched."""
    if fmt not in WRITERS:
        raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    if requests and net:
        raise ValueError("--requests or --net, not both")
    check_run_dir(run_dir)
    chosen = request_rows(run_dir) if requests else net_rows(run_dir) if net else rows(run_dir)
    return WRITERS[fmt](chosen, out)


@contextlib.contextmanager
def _opened(out: str | Path | IO[str]) -> Iterator[IO[str]]:
    """A stream as it is; a path through a temporary file beside it, put in its place once
    everything is written (an export that fails leaves no half file)."""
    if not isinstance(out, str | Path):
        yield out
        out.flush()
        return
    path = Path(out)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8", newline="") as f:
            yield f
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
