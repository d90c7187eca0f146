"""CSV rate traces (testbed.load.trace_csv): a time or interval column and a rate or count column
with their units in the header (or given), read into the Trace that `DURATION COUNT` lines give;
a unit stated nowhere, or a bad cell, is one error naming the file, line and column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from testbed.errors import ConfigError
from testbed.load.trace import load_trace

# three minutes: 120, 300, 60 requests
LINES = "60 120\n60 300\n60 60\n"
SAME = {
    "per-minute.csv": "minute,requests_per_min\n0,120\n1,300\n2,60\n",
    "seconds.csv": "# exported from our gateway\ntime_s,rate_per_s\n0,2\n60,5\n120,1\n",
    "brackets.csv": "Time [min], Rate [1/min]\n0, 120\n1, 300\n2, 60\n",
    "interval.csv": "interval_s,count\n60,120\n60,300\n60,60\n",
    "rpm.txt": "t_h,rpm\n0,120\n0.0166666666667,300\n0.0333333333333,60\n",
}


@pytest.mark.parametrize("name", list(SAME))
def test_a_csv_reads_as_its_duration_count_lines(tmp_path: Path, name: str):
    (tmp_path / "day.txt").write_text(LINES)
    (tmp_path / name).write_text(SAME[name])
    want, got = load_trace(tmp_path / "day.txt"), load_trace(tmp_path / name)
    assert np.allclose(got.durations, want.durations, rtol=1e-6)
    assert np.allclose(got.counts, want.counts, rtol=1e-6)
    assert got.name == name


def test_units_by_option_where_the_header_states_none(tmp_path: Path):
    (tmp_path / "bare.csv").write_text("time,rate\n0,120\n1,300\n2,60\n")
    trace = load_trace(tmp_path / "bare.csv", time_unit="min", rate_unit="per_min")
    assert trace.requests == pytest.approx(480) and trace.seconds == pytest.approx(180)
    with pytest.raises(ConfigError) as exc:
        load_trace(tmp_path / "bare.csv")
    assert str(exc.value).startswith(f"{tmp_path / 'bare.csv'}:1: time: the time column 'time' "
                                     "states no unit")


@pytest.mark.parametrize("text, says", [
    ("minute,rate\n0,1\n", ":1: rate: the rate column 'rate' states no unit"),
    ("minute,requests_per_min\n0,120\n1,x\n", ":3: requests_per_min: expected a number >= 0, "
                                              "got 'x'"),
    ("minute,requests_per_min\n0,120\n0,300\n", ":3: minute: times must increase"),
    ("minute,requests_per_min\n0,120\n", ":2: minute: one row of a time column"),
    ("when,how_many\n0,1\n", ":1: header: expected one time or interval column"),
    ("interval_s,count\n0,5\n", ":2: interval_s: an interval must be > 0"),
    ("minute,requests_per_min\n0,-3\n1,2\n", ":2: requests_per_min: expected a number >= 0"),
])
def test_a_bad_csv_is_one_error_naming_line_and_column(tmp_path: Path, text: str, says: str):
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_trace(tmp_path / "bad.csv")
    assert says in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_the_summary_shows_a_wrong_unit_at_once(tmp_path: Path):
    (tmp_path / "a.csv").write_text(SAME["per-minute.csv"])
    (tmp_path / "b.csv").write_text(SAME["per-minute.csv"].replace("requests_per_min",
                                                                   "rate_per_s"))
    right, wrong = load_trace(tmp_path / "a.csv"), load_trace(tmp_path / "b.csv")
    assert right.summary() == "a.csv: 180 s, 480 requests, mean 2.67 req/s, peak 5 req/s"
    assert wrong.summary() == "b.csv: 180 s, 28,800 requests, mean 160 req/s, peak 300 req/s"


def test_the_cli_prints_a_csv_trace_as_it_loads(tmp_path: Path):
    import os
    import subprocess
    import sys

    (tmp_path / "day.csv").write_text(SAME["per-minute.csv"])
    proc = subprocess.run([sys.executable, "-m", "testbed", "sim", "eval", "--policy", "static",
                           "--service", "imgcls", "--trace", str(tmp_path / "day.csv")],
                          capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2],
                          env=dict(os.environ, COLUMNS="200"))
    assert proc.returncode == 0, proc.stderr
    assert "trace day.csv: 180 s, 480 requests, mean 2.67 req/s, peak 5 req/s" in proc.stderr
