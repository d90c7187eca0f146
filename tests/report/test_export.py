"""A run's rows and request records as CSV and JSON lines, read back against the run directory
(a small one written by hand, its results.json made by the runner's own row function)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from testbed.errors import StateError
from testbed.report.export import (
    columns,
    csv_field,
    export,
    request_rows,
    rows,
    write_csv,
    write_jsonl,
)
from testbed.scenario.results import run_rows
from testbed.scenario.rundir import CellDir, append_jsonl, write_manifest

REQUESTS_PER_CLIENT = 6


def _record(service: str, seq: int, latency_ms: float, error: str | None = None) -> dict:
    return {"service": service, "slice": "ai", "seq": seq, "scheduled": 1.0 + seq, "sent": 1.001 + seq,
            "latency_ms": latency_ms, "latency_sched_ms": latency_ms + 1.0,
            "status": 0 if error else 200, "bytes_up": 100, "bytes_down": 10, "error": error}


def written_run_dir(tmp_path: Path) -> Path:
    """A finished run of two cells (`policy` rule_v2 and hpa), two repetitions each, two
    clients (imgcls, tts) a repetition; the hpa cells' first two imgcls requests fall in the
    warm-up; one timeout per client. results.json holds run_rows' rows, as the runner writes."""
    run = tmp_path / "run"
    run.mkdir()
    scenario = {"name": "t", "duration_s": 10, "time_scale": 1.0, "repetitions": 2, "seed": 0,
                "matrix": {"policy": ["rule_v2", "hpa"]}}
    write_manifest(run, scenario=scenario, testbed={}, source="t.yaml", base_dir=tmp_path,
                   profile="local", overrides={})
    for i, policy in enumerate(("rule_v2", "hpa")):
        for rep in range(2):
            cell = CellDir.create(run, f"{i:02d}-policy-{policy}", rep)
            warmup = {"imgcls-ai-0.jsonl": 2} if policy == "hpa" else {}
            info = {"slug": cell.path.parent.name, "label": f"policy={policy}", "rep": rep,
                    "status": "ok", "params": {"policy": policy}, "services": ["imgcls", "tts"],
                    "time_scale": 1.0, "duration_s": 10, "problems": [],
                    "warmup_requests": warmup}
            cell.info.write_text(json.dumps(info))
            for client, service in (("imgcls-ai-0", "imgcls"), ("tts-ai-1", "tts")):
                for seq in range(1, REQUESTS_PER_CLIENT + 1):
                    append_jsonl(cell.requests / f"{client}.jsonl", _record(
                        service, seq, 100.0 * seq + rep, "timeout" if seq == 3 else None))
            append_jsonl(cell.samples, {"t": 1.0, "service": "imgcls", "ready": 2})
    results = {"rows": run_rows(run), "expect": [], "interrupted": False, "problems": []}
    (run / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return run


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return written_run_dir(tmp_path)


def _results(run: Path) -> list[dict[str, Any]]:
    return json.loads((run / "results.json").read_text())["rows"]


def _as_written(field: str, value: Any) -> bool:
    """Whether the CSV field `field` reads back as `value`."""
    if value is None:
        return field == ""
    if isinstance(value, str):
        return field == value
    return json.loads(field) == value  # numbers, booleans and nested values


def test_csv_reads_back_as_results_json(run_dir: Path, tmp_path: Path):
    out = tmp_path / "rows.csv"
    assert export(run_dir, out, "csv") == len(_results(run_dir))
    with out.open(newline="") as f:
        header, *lines = list(csv.reader(f))
    expected = _results(run_dir)
    # the union of the rows' keys, in the order they first appear
    assert header == list(dict.fromkeys(k for r in expected for k in r))
    assert header[:4] == ["policy", "cell", "rep", "status"]
    assert len(lines) == len(expected) == 8  # 2 cells x 2 repetitions x 2 services
    for line, row in zip(lines, expected, strict=True):
        assert len(line) == len(header)
        got = dict(zip(header, line, strict=True))
        for key in header:
            assert _as_written(got[key], row.get(key)), (key, got[key], row.get(key))
    # a nested value is one JSON field, not a Python repr
    imgcls = next(dict(zip(header, line, strict=True)) for line in lines if "imgcls" in line)
    assert json.loads(imgcls["error_kinds"]) == {"timeout": 1}


def test_jsonl_is_results_json_one_row_a_line(run_dir: Path, tmp_path: Path):
    out = tmp_path / "rows.jsonl"
    assert export(run_dir, out, "jsonl") == 8
    assert [json.loads(line) for line in out.read_text().splitlines()] == _results(run_dir)


def test_request_rows_are_every_record_with_where_it_ran(run_dir: Path):
    records = sorted(run_dir.glob("cells/*/rep-*/requests/*.jsonl"))
    n_records = sum(len(p.read_text().splitlines()) for p in records)
    got = list(request_rows(run_dir))
    assert len(got) == n_records == 2 * 2 * 2 * REQUESTS_PER_CLIENT
    assert columns(got)[:6] == ["cell", "rep", "policy", "client", "warmup", "service"]
    assert {(r["cell"], r["rep"]) for r in got} == {
        ("00-policy-rule_v2", 0), ("00-policy-rule_v2", 1), ("01-policy-hpa", 0), ("01-policy-hpa", 1)}
    assert {r["service"] for r in got if r["client"] == "tts-ai-1"} == {"tts"}
    first = got[0]
    assert first["cell"] == "00-policy-rule_v2" and first["rep"] == 0 and first["seq"] == 1
    # the warm-up's requests are there, marked: the hpa cells' first two imgcls requests
    warm = [(r["cell"], r["rep"], r["client"], r["seq"]) for r in got if r["warmup"]]
    assert warm == [("01-policy-hpa", rep, "imgcls-ai-0", seq) for rep in (0, 1) for seq in (1, 2)]


def test_requests_as_csv_and_jsonl_have_one_line_a_record(run_dir: Path, tmp_path: Path):
    n = len(list(request_rows(run_dir)))
    assert export(run_dir, tmp_path / "r.csv", "csv", requests=True) == n
    with (tmp_path / "r.csv").open(newline="") as f:
        lines = list(csv.DictReader(f))
    assert len(lines) == n
    assert lines[2]["error"] == "timeout" and lines[0]["error"] == ""
    assert lines[0]["warmup"] == "false"
    assert export(run_dir, tmp_path / "r.jsonl", "jsonl", requests=True) == n
    assert [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()] == list(
        request_rows(run_dir))


def test_a_run_cut_short_exports_its_requests_but_has_no_rows(run_dir: Path):
    (run_dir / "results.json").unlink()
    next(iter((run_dir / "cells").glob("01-*/rep-1/cell.json"))).unlink()  # never written
    with pytest.raises(StateError, match=r"no results.json \(the run did not finish\)"):
        rows(run_dir)
    got = list(request_rows(run_dir))
    assert len(got) == 2 * 2 * 2 * REQUESTS_PER_CLIENT
    assert {r["rep"] for r in got if r["cell"] == "01-policy-hpa"} == {0, 1}


def test_what_is_not_a_run_directory_is_one_line(tmp_path: Path):
    (tmp_path / "file.txt").write_text("x")
    for path, why in ((tmp_path, "no manifest.json"), (tmp_path / "file.txt", "not a directory"),
                      (tmp_path / "missing", "no such directory")):
        with pytest.raises(StateError) as info:
            export(path, tmp_path / "out.csv")
        assert why in str(info.value) and "\n" not in str(info.value)
        with pytest.raises(StateError):
            list(request_rows(path))
    assert not (tmp_path / "out.csv").exists()


def test_a_broken_run_directory_leaves_no_half_file(run_dir: Path, tmp_path: Path):
    out = tmp_path / "r.jsonl"
    out.write_text("an earlier export\n")
    (run_dir / "cells" / "01-policy-hpa" / "rep-1" / "cell.json").write_text("{cut sh")
    with pytest.raises(StateError, match=r"rep-1/cell\.json: not JSON"):
        export(run_dir, out, "jsonl", requests=True)
    assert out.read_text() == "an earlier export\n"  # left as it was
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    (run_dir / "results.json").write_text('{"rows": 3}')
    with pytest.raises(StateError, match="no list of rows"):
        rows(run_dir)


def test_writers_take_any_rows_and_a_stream():
    # the helper a `Result.to_csv(path)` needs: list of dicts in, a CSV out
    stream = io.StringIO()
    assert write_csv([{"a": 1, "b": {"x": [1, 2]}}, {"c": True, "a": None}], stream) == 2
    assert stream.getvalue() == 'a,b,c\n1,"{""x"":[1,2]}",\n,,true\n'
    stream = io.StringIO()
    assert write_jsonl(iter([{"a": 1}, {"b": None}]), stream) == 2
    assert stream.getvalue() == '{"a":1}\n{"b":null}\n'
    assert csv_field(0.1 + 0.2) == "0.30000000000000004" and csv_field("x,y") == "x,y"
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        export(Path("."), stream, "xml")


def test_net_rows_are_every_sample_and_conditions_step_with_where_and_when(run_dir: Path,
                                                                           tmp_path: Path):
    """`testbed export --net`: each cell's net.jsonl samples and conditions.jsonl steps, with
    the cell, repetition, matrix values and scenario seconds from the cell's load start."""
    from testbed.report.export import net_rows

    cell = run_dir / "cells" / "00-policy-rule_v2" / "rep-1"
    info = json.loads((cell / "cell.json").read_text())
    (cell / "cell.json").write_text(json.dumps({**info, "time_scale": 2.0,
                                                "load_started": 1000.0}))
    for t in (1001.0, 1002.0):
        append_jsonl(cell / "net.jsonl", {"t": t, "direction": "uplink", "slice": "ai",
                                          "group": "cam", "ue": "10.45.0.2", "bytes": 100,
                                          "rate_mbit": 4.5, "drops": 0})
    append_jsonl(cell / "conditions.jsonl", {"t": 1001.5, "time_s": 3.0, "capacity_mbit": 10})
    got = list(net_rows(run_dir))
    assert [(r["series"], r["t_s"], r["cell"], r["rep"], r["policy"]) for r in got] == [
        ("net", 2.0, "00-policy-rule_v2", 1, "rule_v2"), ("net", 4.0, "00-policy-rule_v2", 1, "rule_v2"),
        ("conditions", 3.0, "00-policy-rule_v2", 1, "rule_v2")]
    assert got[0]["ue"] == "10.45.0.2" and got[0]["rate_mbit"] == 4.5
    out = tmp_path / "net.csv"
    assert export(run_dir, out, "csv", net=True) == 3
    assert next(csv.DictReader(out.open()))["group"] == "cam"
    with pytest.raises(ValueError, match="not both"):
        export(run_dir, out, "csv", net=True, requests=True)
