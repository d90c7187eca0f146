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


BARE_SCENARIO = """\
name: bare-units
engine: sim
duration_s: 180
services:
  - {name: imgcls, policy: static}
clients:
  - {service: imgcls, trace: bare.csv}
"""


def test_a_scenario_gives_the_units_its_csv_header_lacks(tmp_path: Path):
    from testbed.scenario.load import parse_scenario
    from testbed.scenario.simcell import run_sim_cell

    (tmp_path / "bare.csv").write_text("time,rate\n0,120\n1,300\n2,60\n")
    with pytest.raises(ConfigError) as exc:  # no units anywhere: refused at load, not in a cell
        parse_scenario(BARE_SCENARIO, "bare.yaml", tmp_path)
    assert "bare.csv:1: time: the time column 'time' states no unit" in str(exc.value)
    with_units = BARE_SCENARIO + "trace_units: {time: min, rate: per_min}\n"
    scn = parse_scenario(with_units, "bare.yaml", tmp_path).scenario
    (tmp_path / "day.txt").write_text(LINES)  # the same three minutes
    same = parse_scenario(BARE_SCENARIO.replace("bare.csv", "day.txt"), "day.yaml",
                          tmp_path).scenario

    def sim(s):
        out = run_sim_cell(s, tmp_path, seed=0)["imgcls"]
        return {k: v for k, v in out.items() if not k.startswith("steps_per")}

    assert sim(scn) == sim(same) and sim(scn)["proc_time"] > 0
    from testbed.scenario.cell import load_job  # the testbed's client, in its own process

    job = load_job(scn, scn.clients[0], 0, 0, tmp_path)
    assert job.options()[6:8] == ("--trace-time-unit", "min")
    assert job.offsets() == load_job(same, same.clients[0], 0, 0, tmp_path).offsets()
    assert len(job.offsets()) == 480


def test_an_unknown_unit_is_one_error_naming_the_field(tmp_path: Path):
    from testbed.scenario.load import parse_scenario

    (tmp_path / "bare.csv").write_text("time,rate\n0,120\n")
    with pytest.raises(ConfigError) as exc:
        parse_scenario(BARE_SCENARIO + "trace_units: {time: fortnight}\n", "bare.yaml", tmp_path)
    assert "bare.yaml:8: trace_units" in str(exc.value) and "unknown time unit 'fortnight'" \
        in str(exc.value), str(exc.value)


def test_commands_take_the_units_as_options(tmp_path: Path):
    import os
    import subprocess
    import sys

    (tmp_path / "bare.csv").write_text("time,rate\n0,120\n1,300\n2,60\n")

    def sim_eval(*units: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "testbed", "sim", "eval", "--policy", "static",
                               "--service", "imgcls", "--trace", str(tmp_path / "bare.csv"), *units],
                              capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, COLUMNS="200"))

    ok = sim_eval("--trace-time-unit", "min", "--trace-rate-unit", "per_min")
    assert ok.returncode == 0, ok.stderr
    assert "trace bare.csv: 180 s, 480 requests" in ok.stderr
    bad = sim_eval("--trace-time-unit", "fortnight")
    assert bad.returncode != 0 and "--trace-time-unit" in bad.stderr \
        and "unknown time unit 'fortnight'" in bad.stderr and "Traceback" not in bad.stderr


def test_train_and_tune_read_their_own_csv_traces_in_the_units_given(tmp_path: Path):
    import os
    import subprocess
    import sys

    from testbed.cli.train import _command_line, _training_days, _unit_words, _units
    from testbed.train.ppo import TrainConfig

    csv = tmp_path / "bare.csv"
    csv.write_text("time,rate\n0,120\n1,300\n2,60\n")
    train, val = _training_days(tmp_path, [csv], csv, units=_units("min", "per_min"))
    assert [float(t.seconds) for t in [*train, *val]] == [180.0, 180.0]
    assert [int(t.counts.sum()) for t in [*train, *val]] == [480, 480]
    # the manifest's rerun command keeps the units with the files
    command = _command_line(TrainConfig(service="imgcls", steps=10), train, val,
                            _unit_words("min", "per_min"))
    assert "--val-trace bare.csv --trace-time-unit min --trace-rate-unit per_min" in command

    for cmd in (["train", "imgcls", "--trace", str(csv), "--val-trace", str(csv)],
                ["tune", "imgcls", "--trials", "1", "--trace", str(csv)]):
        bad = subprocess.run([sys.executable, "-m", "testbed", *cmd, "--trace-time-unit",
                              "fortnight", "--out", str(tmp_path / "out")],
                             capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, COLUMNS="200"))
        assert bad.returncode != 0 and "--trace-time-unit" in bad.stderr \
            and "unknown time unit 'fortnight'" in bad.stderr and "Traceback" not in bad.stderr, \
            (cmd, bad.stderr)
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, text", [
    ("iso.csv", "timestamp,requests_per_min\n2026-11-01T08:00:00Z,120\n2026-11-01T08:01:00Z,300\n"
                "2026-11-01T08:02:00Z,60\n"),
    ("iso-local.csv", "time,count\n2026-11-01 08:00:00,120\n2026-11-01 08:01:00,300\n"
                      "2026-11-01 08:02:00,60\n"),
    ("rate_rps.csv", "time_s,rate_rps\n0,2\n60,5\n120,1\n"),
    ("req-s.csv", "time_s,req/s\n0,2\n60,5\n120,1\n"),
    ("req-min.csv", "minute,rate [req/min]\n0,120\n1,300\n2,60\n"),
    ("per_min.csv", "minute,per_min\n0,120\n1,300\n2,60\n"),
    ("qps.csv", "time_s,qps\n0,2\n60,5\n120,1\n"),
])
def test_iso_timestamps_and_the_common_rate_units_read_as_their_lines(tmp_path: Path, name: str,
                                                                     text: str):
    (tmp_path / "day.txt").write_text(LINES)
    (tmp_path / name).write_text(text)
    want, got = load_trace(tmp_path / "day.txt"), load_trace(tmp_path / name)
    assert np.allclose(got.durations, want.durations) and np.allclose(got.counts, want.counts)


@pytest.mark.parametrize("text, says", [
    # rows every 5 minutes, the one at 00:10 missing: 00:05 would silently have lasted 10 minutes
    ("time_min,count\n0,300\n5,310\n15,320\n20,300\n25,290\n",
     ":4: time_min: the rows step 5 min and this one comes 10 min after the one before: a missing row?"),
    ("timestamp,count\n2026-11-01T00:00:00Z,3\n2026-11-01T00:00:01Z,4\n2026-11-01T00:00:02Z,5\n"
     "2026-11-01T00:00:04Z,2\n",
     ":5: timestamp: the rows step 1 s and this one comes 2 s after the one before"),
    ("time_s,count\n0,2.5\n1,3\n", ":2: count: a count is whole requests, got '2.5'"),
    ("timestamp,count\n2026-11-01T00:00:00Z,3\nlater,4\n", ":3: timestamp: expected an ISO 8601"),
])
def test_a_missing_row_a_fractional_count_and_a_bad_timestamp_are_refused(tmp_path: Path,
                                                                         text: str, says: str):
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_trace(tmp_path / "bad.csv")
    assert says in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_rows_of_their_own_lengths_are_not_a_missing_row(tmp_path: Path):
    (tmp_path / "irregular.csv").write_text("time_s,count\n0,3\n7,4\n9,5\n20,1\n31,0\n")
    assert load_trace(tmp_path / "irregular.csv").durations.tolist() == [7, 2, 11, 11, 11]
