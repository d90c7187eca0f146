"""Conditions traces in a testbed file: read from the file's folder, errors naming file, line, field."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.config import load_testbed
from testbed.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TESTBED = """\
link:
  capacity_mbit: 100
  conditions:
    - {{trace: {trace}, {target}}}
slices:
  - {{name: ai, sst: 1, subnet: 10.45.0.0/24, guaranteed_mbit: 20}}
ue_groups:
  - {{name: cam, slice: ai}}
"""


def _load(tmp_path: Path, csv: str, target: str = "slice: ai"):
    (tmp_path / "t.csv").write_text(csv)
    (tmp_path / "tb.yaml").write_text(TESTBED.format(trace="t.csv", target=target))
    return load_testbed(tmp_path / "tb.yaml")


def _problem(tmp_path: Path, csv: str, target: str = "slice: ai") -> str:
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, csv, target)
    [p] = exc.value.problems
    return str(p)


def test_the_shipped_example_trace_loads_and_holds_each_value_until_the_next_step(tmp_path: Path):
    example = (ROOT / "scenarios" / "conditions" / "radio-fade.csv").read_text()
    [c] = _load(tmp_path, example, "ue_group: cam").link.conditions
    assert c.target == "ue_group cam" and len(c.steps) == 6
    assert (c.at(29.9).capacity_mbit, c.at(29.9).loss) == (30, 0.005)
    assert (c.at(30).capacity_mbit, c.at(30).loss) == (10, 0.02)
    assert c.at(1000).capacity_mbit == 50


def test_an_empty_cell_keeps_the_value_before(tmp_path: Path):
    [c] = _load(tmp_path, "time_s,capacity_mbit,loss\n0,50,0.01\n5,,0.02\n").link.conditions
    assert (c.at(6).capacity_mbit, c.at(6).loss) == (50, 0.02)


@pytest.mark.parametrize(("csv", "says"), [
    ("time_s,capacity_mbit\n0,50\n5,fast\n", "t.csv:3: capacity_mbit: not a number: 'fast'"),
    ("time_s,capacity_mbit\n0,50\n0,10\n", "t.csv:3: time_s: 0 is not after the row before"),
    ("time_s,capacity_mbit,loss\n0,50,1.5\n", "t.csv:2: loss: Input should be less than 1"),
    ("time_s,bandwidth\n0,50\n", "t.csv:1: unknown column 'bandwidth'"),
    ("capacity_mbit\n50\n", "t.csv:1: the header must start with time_s"),
])
def test_a_bad_trace_is_one_line_naming_the_yaml_field_and_the_csv_line(tmp_path: Path, csv, says):
    p = _problem(tmp_path, csv)
    assert p.startswith(f"{tmp_path / 'tb.yaml'}:4: link.conditions[0]"), p
    assert says in p and "\n" not in p


def test_a_missing_trace_file_and_an_unknown_target_are_named(tmp_path: Path):
    (tmp_path / "tb.yaml").write_text(TESTBED.format(trace="nope.csv", target="slice: ai"))
    with pytest.raises(ConfigError) as exc:
        load_testbed(tmp_path / "tb.yaml")
    assert "nope.csv" in str(exc.value.problems[0])
    p = _problem(tmp_path, "time_s,capacity_mbit\n0,5\n", "slice: video")
    assert "link.conditions[0].slice: no slice named 'video'" in p
    p = _problem(tmp_path, "time_s,capacity_mbit,delay_ms\n0,5,10\n", "ue_group: cam")
    assert "delay_ms applies to the whole link only" in p
