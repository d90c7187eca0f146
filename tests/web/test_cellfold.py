"""A cell's fold: its bins on the scenario axis, its live tally (service_row's definitions, so the
page's figures end where results.json's do), what it keeps out (the warm-up, a half-written
line), and its deltas adding up to its snapshot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.clock import ScenarioClock
from testbed.load.stats import percentile
from testbed.scenario.results import cell_rows, read_records, service_row
from testbed.web.bins import bin_width
from testbed.web.cellfold import CellFold, masked_label
from testbed.web.tail import JsonlTail
from tests.web.written_run import SECRET, TIME_SCALE, WARMUP_S, WrittenRun, record

FIELDS = ("requests", "errors", "violations", "slo_violation_rate", "mean_latency_ms",
          "p50_latency_ms", "p99_latency_ms", "p99_lateness_ms")


def _records() -> list[dict]:
    """Two warm-up requests, then measured ones: a slow one over the SLO, an error, late sends."""
    out = [record(1, 0.2, 40.0), record(2, 0.9, 60.0)]  # wall 0-2 s: the warm-up (4 scenario s)
    for i in range(3, 40):
        out.append(record(i, 2.0 + 0.1 * i, 30.0 + 5 * (i % 7), late_ms=2.0 + i % 5))
    out.append(record(40, 5.0, 400.0, server_ms=300.0))  # 400 + 300 = 700 scenario ms > 500
    out.append(record(41, 5.5, 4000.0, error="timeout"))
    return out


def test_the_live_tally_has_service_rows_figures_and_the_ended_cell_has_cell_rows(tmp_path: Path):
    run = WrittenRun(tmp_path)
    run.start_load(warmup_requests=2)
    run.write_records(_records())
    for t in range(-4, 10):
        run.write_sample(t, ready=1 if t < 3 else 2, desired=2, warmup=t < 0)
    fold = CellFold(run.cell)
    fold.poll()
    fold._tally_at = 0.0  # the tally's percentiles are due now
    fold._tally_dirty = True
    fold.poll()
    live = {r["service"]: r for r in fold.summary()["rows"]}["imgcls"]
    assert fold.summary()["source"] == "live"
    measured = read_records(run.cell, {"imgcls-ai-0.jsonl": 2})["imgcls"]
    want = service_row(measured, "imgcls", clock=ScenarioClock(TIME_SCALE), duration_s=10, slo_ms=500.0)
    for field in FIELDS:
        assert live[field] == pytest.approx(want[field]), field
    assert live["requests"] == len(_records()) - 2  # the warm-up's two are on the axis only
    assert live["mean_replicas"] == pytest.approx((3 * 1 + 7 * 2) / 10)

    run.finish()
    fold.poll()
    assert fold.summary() == {"source": "cell", "rows": cell_rows(run.cell)}
    final = {r["service"]: r for r in fold.summary()["rows"]}["imgcls"]
    for field in (*FIELDS, "mean_replicas"):
        assert final[field] == pytest.approx(live[field]), field


def test_bins_count_each_answer_where_it_came_in_at_its_scenario_latency(tmp_path: Path):
    run = WrittenRun(tmp_path)
    run.start_load()
    recs = _records()
    run.write_records(recs)
    fold = CellFold(run.cell)
    fold.poll()
    snap = fold.snapshot()
    assert snap["t0"] == -WARMUP_S and snap["width"] == 1.0
    s = snap["services"]["imgcls"]
    by_bin: dict[int, list[float]] = {}
    answered: dict[int, list[bool]] = {}  # per bin: each answer's SLO violation
    for r in recs:
        done = (r["sent"] + r["latency_ms"] / 1000 - run.info["load_started"]) * TIME_SCALE - WARMUP_S
        i = int((done + WARMUP_S) // 1.0)
        scn_ms = r["latency_ms"] + r["server_ms"] * (TIME_SCALE - 1)
        answered.setdefault(i, []).append(r["error"] is not None or scn_ms > 500)
        if r["error"] is None:
            by_bin.setdefault(i, []).append(scn_ms)
        else:
            assert s["errors"][i] == 1.0  # per scenario second
    for i, lat in by_bin.items():
        assert s["p99"][i] == pytest.approx(percentile(lat, 0.99), abs=0.01)
    for i, violated in answered.items():
        assert s["rate"][i] == len(violated)
        assert s["viol"][i] == pytest.approx(100 * sum(violated) / len(violated))
    assert sum(s["rate"]) == len(recs)  # one-second bins: answers per second add up to the count
    assert sum(1 for v in s["viol"] if v) == 2  # the 700 ms answer and the timeout
    # the timed-out request was in flight 4 wall s = 8 scenario s: one request through 8 bins
    assert sum(s["inflight"]) == pytest.approx(
        sum(r["latency_ms"] / 1000 * TIME_SCALE for r in recs), rel=0.01)


def test_a_half_written_line_waits_and_the_rows_before_the_loads_start_wait_for_it(tmp_path: Path):
    run = WrittenRun(tmp_path)
    rec = json.dumps(record(1, 2.5, 50.0))
    run.write_records([], partial=rec[:40])
    run.write_net(-3.0, 1.0, 0)  # the testbed is up before the load begins
    fold = CellFold(run.cell)
    fold.poll()
    assert fold.phase() == "starting replicas" and fold.n == 0
    run.start_load()
    with (run.cell / "requests" / "imgcls-ai-0.jsonl").open("a") as f:
        f.write(rec[40:] + "\n")
    run.write_net(3.0, 5.0, 0)
    fold.poll()
    assert sum(fold.snapshot()["services"]["imgcls"]["rate"]) == 1
    # the sample before the load's start is off the axis; the one after is in
    assert [v for v in fold.snapshot()["links"]["slice|ai|uplink"]["mbit"] if v is not None] == [5.0]


def test_the_deltas_add_up_to_the_snapshot(tmp_path: Path):
    run = WrittenRun(tmp_path)
    run.start_load()
    fold = CellFold(run.cell)
    merged: dict = {}
    recs = _records()
    for step in range(4):
        run.write_records(recs[step * 10:(step + 1) * 10])
        run.write_sample(step, ready=1, desired=1 + step % 2)
        run.write_decision(step * 3.0, applied=step % 2)
        run.write_net(step, 2.0 + step, drops=3 * step, ue_mbit=1.0)
        fold.poll()
        d = fold.delta()
        assert d is not None
        if not merged:
            merged = d
            continue
        for name, series in d["services"].items():
            for k, vals in series.items():
                merged["services"][name][k] = merged["services"][name][k][:d["from"]] + vals
        for key, series in d["links"].items():
            have = merged["links"].setdefault(key, {k: [] for k in series})
            for k, vals in series.items():
                have[k] = have[k][:d["net_from"]] + vals
        for name in ("decisions", "replica_events", "problems", "conditions"):
            merged[name] = merged[name][:d[f"{name}_from"]] + d[name]
    run.write_records(recs[40:])
    fold.poll()
    d = fold.delta()
    for name, series in d["services"].items():
        for k, vals in series.items():
            merged["services"][name][k] = merged["services"][name][k][:d["from"]] + vals
    snap = fold.snapshot()
    assert merged["services"] == snap["services"]
    assert merged["links"] == snap["links"]
    assert merged["decisions"] == snap["decisions"] and len(snap["decisions"]) == 4
    # drops are counted from the counter's rise, per wall second; two UEs' rates add up per sample
    assert sum(snap["links"]["slice|ai|uplink"]["drops"]) == pytest.approx(9 / (2.0 / TIME_SCALE))
    assert [v for v in snap["links"]["group|ai|uplink"]["mbit"] if v is not None] == [2.0] * 4


def test_a_cell_behind_its_schedule_shows_as_it_goes(tmp_path: Path):
    run = WrittenRun(tmp_path)
    run.start_load()
    # 40 requests sent 40 wall ms late: 80 scenario ms, over a tenth of the 500 ms SLO
    run.write_records([record(i, 2 + 0.1 * i, 30.0, late_ms=40.0) for i in range(1, 41)])
    fold = CellFold(run.cell)
    fold.poll()
    assert fold.behind_schedule() == {"imgcls": pytest.approx(80.0)}


def test_a_secret_matrix_value_is_masked_and_the_key_does_not_name_it(tmp_path: Path):
    params = {"testbed.core.key_seed": SECRET, "slicing": True}
    assert masked_label(params) == "testbed.core.key_seed=<redacted>, slicing=on"
    run = WrittenRun(tmp_path, params=params, slug=f"03-testbed.core.key_seed-{SECRET}_slicing-on")
    fold = CellFold(run.cell)
    fold.poll()
    assert SECRET not in json.dumps(fold.snapshot())
    assert fold.key == "03/0"


def test_a_long_cell_keeps_its_bins_bounded():
    assert bin_width(60) == 1 and bin_width(1200) == 1 and bin_width(3600) == 3
    assert bin_width(86400) == 72


def test_the_tail_reads_whole_lines_and_skips_broken_ones(tmp_path: Path):
    f = tmp_path / "x.jsonl"
    tail = JsonlTail(f)
    assert tail.read() == []
    f.write_text('{"a": 1}\nnot json\n{"b": 2')
    assert tail.read() == [{"a": 1}]
    with f.open("a") as out:
        out.write("}\n[1]\n")
    assert tail.read() == [{"b": 2}]  # a line that is no object is skipped too
    f.write_text('{"c": 3}\n')  # rewritten shorter: read again from the start
    assert tail.read() == [{"c": 3}]
    f.write_text("".join(f'{{"i": {i}}}\n' for i in range(100)))
    assert len(tail.read(limit=50)) < 100 and tail.behind
