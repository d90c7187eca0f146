"""`testbed export`: a run's rows or request records into a file or onto standard output; what is
not a run directory, or not a format, is one error and a non-zero exit."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from testbed.cli import main
from tests.report.test_export import written_run_dir


def test_rows_as_csv_into_a_file(tmp_path: Path, capsys):
    run = written_run_dir(tmp_path)
    out = tmp_path / "rows.csv"
    assert main(["export", str(run), "--format", "csv", "--out", str(out)]) == 0
    assert f"wrote 8 rows to {out}" in capsys.readouterr().out
    results = json.loads((run / "results.json").read_text())["rows"]
    with out.open(newline="") as f:
        lines = list(csv.DictReader(f))
    assert [(r["cell"], r["rep"], r["service"]) for r in lines] == [
        (r["cell"], str(r["rep"]), r["service"]) for r in results]


def test_requests_onto_standard_output_hold_the_data_alone(tmp_path: Path, capsys):
    run = written_run_dir(tmp_path)
    n_records = sum(len(p.read_text().splitlines())
                    for p in run.glob("cells/*/rep-*/requests/*.jsonl"))
    assert main(["export", str(run), "--requests", "--format", "jsonl", "--out", "-"]) == 0
    got = capsys.readouterr()
    lines = [json.loads(line) for line in got.out.splitlines()]
    assert len(lines) == n_records == 48
    assert {"cell", "rep", "client", "service", "latency_ms"} <= set(lines[0])
    assert f"wrote {n_records} request records to standard output" in got.err
    assert main(["export", str(run), "--requests", "--out", "-"]) == 0  # csv by default
    assert len(list(csv.DictReader(io.StringIO(capsys.readouterr().out)))) == n_records


def test_a_folder_that_is_not_a_run_is_one_error_line(tmp_path: Path, capsys):
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "x.csv")]) != 0
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"error: {tmp_path} is not a run directory (no manifest.json; `testbed run` makes one "
        "under runs/)"]
    assert not (tmp_path / "x.csv").exists()


def test_an_unknown_format_is_typers_error(tmp_path: Path, capsys):
    run = written_run_dir(tmp_path)
    assert main(["export", str(run), "--format", "xml", "--out", "-"]) == 2
    err = capsys.readouterr().err
    assert "Invalid value for '--format'" in err and "'csv', 'jsonl'" in err


def test_an_output_that_cannot_be_written_is_named(tmp_path: Path, capsys):
    run = written_run_dir(tmp_path)
    assert main(["export", str(run), "--out", str(tmp_path)]) != 0
    assert f"--out: {tmp_path} is a directory" in capsys.readouterr().err
