"""Results and reports from a run directory alone (a small one written by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.clock import ScenarioClock
from testbed.report import write_report
from testbed.scenario.results import percentile, run_rows, service_row
from testbed.scenario.rundir import CellDir, append_jsonl, write_manifest


def _record(service: str, latency_ms: float, error: str | None = None, seq: int = 0) -> dict:
    return {"service": service, "slice": "ai", "seq": seq, "scheduled": 1.0, "sent": 1.001,
            "latency_ms": latency_ms, "latency_sched_ms": latency_ms + 1.0,
            "status": 0 if error else 200, "bytes_up": 100, "bytes_down": 10, "error": error}


def test_service_row_counts_violations_in_scenario_time():
    recs = [_record("imgcls", 100), _record("imgcls", 200), _record("imgcls", 50, "timeout"),
            _record("imgcls", 90)]
    # time scale 3: 200 ms wall is 600 ms of scenario time, over imgcls' 500 ms SLO
    row = service_row(recs, "imgcls", clock=ScenarioClock(3.0), duration_s=2.0, slo_ms=500)
    assert row["requests"] == 4 and row["errors"] == 1
    assert row["violations"] == 2  # the timeout and the slow one
    assert row["slo_violation_rate"] == pytest.approx(0.5)
    assert row["mean_latency_ms"] == pytest.approx((100 + 200 + 90) * 3 / 3)
    assert row["throughput_rps"] == pytest.approx(1.5)
    assert row["error_kinds"] == {"timeout": 1}


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4], 0.5) == pytest.approx(2.5)
    assert percentile([], 0.5) is None


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    scenario = {"name": "t", "duration_s": 10, "time_scale": 1.0, "repetitions": 1, "seed": 0,
                "matrix": {"slicing": [True, False], "iperf_flows": [10]},
                "expect": ["slo_violation_rate[service=imgcls, slicing=on] < "
                           "slo_violation_rate[service=imgcls, slicing=off] effect 0.2"]}
    write_manifest(run, scenario=scenario, testbed={}, source="t.yaml", base_dir=tmp_path,
                   profile="local", overrides={})
    for i, slicing in enumerate((True, False)):
        cell = CellDir.create(run, f"{i:02d}-slicing-{'on' if slicing else 'off'}", 0)
        info = {"slug": cell.path.parent.name, "label": "x", "rep": 0, "status": "ok",
                "params": {"slicing": slicing, "iperf_flows": 10}, "services": ["imgcls"],
                "time_scale": 1.0, "duration_s": 10, "problems": []}
        cell.info.write_text(json.dumps(info))
        slow = 0 if slicing else 5
        with (cell.requests / "imgcls-ai-0.jsonl").open("w") as f:
            for k in range(10):
                f.write(json.dumps(_record("imgcls", 900 if k < slow else 100, seq=k)) + "\n")
        for t in range(10):
            append_jsonl(cell.samples, {"t": float(t), "service": "imgcls", "ready": 2,
                                        "desired": 2, "arrivals_total": t, "violations_total": 0})
        append_jsonl(cell.decisions, {"service": "imgcls", "reward": -0.05, "t": 5.0})
        (cell.iperf / "be-downlink.json").write_text(json.dumps(
            {"end": {"sum_received": {"bits_per_second": 80e6}}}))
    return run


def test_rows_from_a_run_directory(tmp_path):
    rows = run_rows(_run_dir(tmp_path))
    svc = {r["slicing"]: r for r in rows if r.get("service") == "imgcls"}
    assert svc[True]["slo_violation_rate"] == 0 and svc[False]["slo_violation_rate"] == 0.5
    assert svc[True]["mean_replicas"] == 2 and svc[True]["reward"] == -0.05
    iperf = [r for r in rows if "iperf_goodput_mbit" in r]
    assert {(r["slice"], r["direction"], r["iperf_goodput_mbit"]) for r in iperf} == {
        ("be", "downlink", 80.0)}


def test_report_is_self_contained_and_shows_the_paper(tmp_path):
    run = _run_dir(tmp_path)
    md, page = write_report(run)
    text = md.read_text()
    assert "## Expectations" in text and "**PASS**" in text
    assert "Figs 5.7 / 5.8" in text  # the matrix has slicing and iperf_flows
    # the slicing table: rates, means, then p50 / p99 (half the no-slice requests at 900 ms)
    assert "| imgcls | 10 | 0.5000 | 0.0000 | 500.0 | 100.0 | 500.0 / 900.0 | 100.0 / 100.0 |" \
        in text
    html = page.read_text()
    assert "data:image/png;base64," in html and "<img" in html
    assert 'src="plots/' not in html  # nothing outside the file
    pngs = list((run / "plots").glob("*.png"))
    assert {p.name for p in pngs} >= {"slicing-imgcls.png", "slicing-cdf-imgcls.png",
                                      "services.png", "iperf.png"}
    assert all(p.stat().st_size > 5000 for p in pngs)


def test_report_names_problems_and_interruption(tmp_path):
    run = _run_dir(tmp_path)
    info_path = next((run / "cells").glob("01-*/rep-0/cell.json"))
    info = json.loads(info_path.read_text())
    info.update(status="interrupted", problems=["iperf3 in slice be failed: boom"])
    info_path.write_text(json.dumps(info))
    append_jsonl(info_path.parent / "events.jsonl", {"kind": "died", "service": "imgcls",
                                                     "replica": "imgcls-3", "detail": "SIGKILL"})
    md, _ = write_report(run)
    text = md.read_text()
    assert "Problems during the run" in text
    assert "status interrupted" in text and "boom" in text and "imgcls-3 of imgcls died" in text


def test_over_time_buckets_hold_latency_percentiles_and_violation_rates(tmp_path):
    """The over-time plot's latency and SLO panels: records bucketed by send time in scenario
    time, latencies scaled by the time scale, errors counted as violations."""
    from testbed.report.plots import latency_buckets, timeseries

    cell = CellDir.create(tmp_path, "00-base", 0)
    t0, ts = 1000.0, 2.0
    cell.info.write_text(json.dumps({"slug": "00-base", "time_scale": ts, "duration_s": 40,
                                     "measured_s": 40, "measure_started": t0,
                                     "slo_ms": {"imgcls": 500.0}}))
    rows = []
    for k in range(40):  # one request per wall half second: 40 s of scenario time
        sent = t0 + k * 0.5
        slow = 20 <= k < 30  # scenario seconds 20-30: 400 ms wall = 800 ms scenario, over SLO
        rows.append({**_record("imgcls", 400.0 if slow else 100.0, seq=k), "sent": sent})
    rows[5]["error"] = "timeout"
    with (cell.requests / "imgcls-ai-0.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    for t in range(40):
        append_jsonl(cell.samples, {"t": float(t), "service": "imgcls", "ready": 1 + (t >= 20),
                                    "desired": 2, "arrivals_total": t, "violations_total": 0})
    b = latency_buckets(cell.path)["imgcls"]
    assert b["bucket_s"] == 1.0 and b["slo_ms"] == 500.0
    assert b["t"][:2] == [0.5, 1.5] and len(b["t"]) == 40
    assert b["p50"][0] == pytest.approx(200.0) and b["p99"][25] == pytest.approx(800.0)
    assert b["violation_rate"][5] == 1.0  # the timeout
    assert sum(b["violation_rate"][20:30]) == 10 and sum(b["violation_rate"][:5]) == 0
    png = timeseries(cell.path, tmp_path, "x")
    assert png is not None and png.stat().st_size > 20000


def test_report_shows_what_the_replicas_ran_only_when_they_were_asked(tmp_path):
    run = _run_dir(tmp_path)
    md, _ = write_report(run)
    assert "Replicas as they ran" not in md.read_text()  # no replicas.jsonl: no section
    cell = next(run.glob("cells/00-*/rep-0"))
    for stretch_set in (1.125, 1.2):  # the second report disagrees with the cluster
        append_jsonl(cell / "replicas.jsonl", {
            "t": 10.0, "service": "imgcls", "replica": "imgcls-1", "gpu": 0, "share_set": 35.0,
            "batch_set": 4, "stretch_set": stretch_set, "share": 35.0, "batch": 4, "stretch": 1.125})
    md, _ = write_report(run)
    text = md.read_text()
    assert "## Replicas as they ran" in text
    assert "| 00-slicing-on | 0 | imgcls | 2 | 35.0 | 4.00 | 1.125 | 1.125 | 1 | – |" in text


def test_over_time_buckets_of_a_warmup_come_before_the_measured_window(tmp_path):
    """A cell with `warmup_s`: its warm-up's requests are plotted before 0 (and shaded), the
    measured window from 0, as the rows count them."""
    from testbed.report.plots import latency_buckets, timeseries

    cell = CellDir.create(tmp_path, "00-base", 0)
    t0 = 1000.0  # the measured window's start; the warm-up's 20 s come before it
    cell.info.write_text(json.dumps({"slug": "00-base", "time_scale": 1.0, "duration_s": 20,
                                     "measured_s": 20, "warmup_s": 20, "measure_started": t0,
                                     "slo_ms": {"imgcls": 500.0}}))
    rows = [{**_record("imgcls", 900.0 if k < 20 else 100.0, seq=k + 1), "sent": t0 - 20 + k}
            for k in range(40)]  # late in the warm-up, on time after it
    with (cell.requests / "imgcls-ai-0.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    for t in range(-19, 21):
        append_jsonl(cell.samples, {"t": float(t), "service": "imgcls", "ready": 1 + (t > 0),
                                    "desired": 2, "arrivals_total": t + 20, "violations_total": 0,
                                    **({"warmup": True} if t <= 0 else {})})
    b = latency_buckets(cell.path)["imgcls"]
    assert b["bucket_s"] == 1.0 and len(b["t"]) == 40
    assert (b["t"][0], b["t"][20]) == (-19.5, 0.5)
    assert b["violation_rate"][:20] == [1.0] * 20 and b["violation_rate"][20:] == [0.0] * 20
    png = timeseries(cell.path, tmp_path, "warm")
    assert png is not None and png.stat().st_size > 20000


def test_latency_cdfs_draw_one_line_per_cell_with_its_tail(tmp_path, monkeypatch):
    """Fig 5.7's distribution panel: one CDF per (flows, slice) cell, drawn from the request
    records, so the no-slice cell's tail (half its requests at 900 ms) is in its line."""
    from testbed.report import plots

    drawn = {}
    real_step = plots.plt.Axes.step

    def step(ax, xs, ys, *args, **kw):
        drawn[kw["label"]] = (list(xs), list(ys))
        return real_step(ax, xs, ys, *args, **kw)

    monkeypatch.setattr(plots.plt.Axes, "step", step)
    [png] = plots.latency_cdfs(_run_dir(tmp_path), tmp_path)
    assert png.name == "slicing-cdf-imgcls.png" and png.stat().st_size > 10000
    assert set(drawn) == {"10 flows, with slice", "10 flows, no slice"}
    xs, ys = drawn["10 flows, no slice"]
    assert xs[4:6] == [100, 900] and ys[4] == 0.5 and ys[-1] == 1.0
    assert max(drawn["10 flows, with slice"][0]) == 100


def test_the_network_panel_plots_each_busy_slice_over_scenario_time_beside_latency(tmp_path):
    """net.jsonl's slice rows at scenario time ((t - measure_started) x time scale), idle slices
    and UE leaves left out; the report shows the panel in "Over time"."""
    from testbed.report.netplot import slice_series, slice_throughput

    cell = CellDir.create(tmp_path, "00-base", 0)
    cell.info.write_text(json.dumps({"slug": "00-base", "time_scale": 2.0, "duration_s": 20,
                                     "measured_s": 20, "measure_started": 1000.0}))
    with (cell.requests / "imgcls-ai-0.jsonl").open("w") as f:
        f.writelines(json.dumps({**_record("imgcls", 100.0, seq=k), "sent": 1000.0 + k}) + "\n"
                     for k in range(10))
    for k in range(10):
        for slice_, direction, mbit in (("ai", "uplink", 20.0 + k), ("ai", "downlink", 3.0),
                                        ("be", "uplink", 0.0)):
            append_jsonl(cell.net, {"t": 1000.0 + k, "direction": direction, "slice": slice_,
                                    "group": None, "ue": None, "rate_mbit": mbit})
        append_jsonl(cell.net, {"t": 1000.0 + k, "direction": "uplink", "slice": "ai",
                                "group": "cam", "ue": "10.45.0.2", "rate_mbit": 5.0})
    series = slice_series(cell.path)
    assert sorted(series) == [("ai", "downlink"), ("ai", "uplink")]
    assert series[("ai", "uplink")]["t"][:3] == [0.0, 2.0, 4.0]
    assert series[("ai", "uplink")]["mbit"][:2] == [20.0, 21.0]
    png = slice_throughput(cell.path, tmp_path, "x", title="cell base")
    assert png is not None and png.stat().st_size > 20000
