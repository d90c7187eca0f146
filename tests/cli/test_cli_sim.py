"""`testbed sim eval` as a user runs it: JSON keys, the oracle gap, a bad option."""

from __future__ import annotations

import json

import pytest

from testbed.cli import main


def test_sim_eval_json_reports_the_oracle_and_the_gap(tmp_path, capsys):
    trace = tmp_path / "flat.txt"
    trace.write_text("1 10\n" * 600)  # 10 x 0.15 -> 1 request/s: one instance is always enough
    rc = main(["sim", "eval", "--service", "chatbot", "--trace", str(trace), "--json"])
    assert rc == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    for key in ("slo_violation_rate", "instances", "proc_time", "reward", "steps_per_second"):
        assert key in row
    assert row["steps"] == 20 and row["instances"] == 1.0
    # rule v2 never leaves one instance here, which is also the best schedule
    assert row["oracle_reward"] == pytest.approx(-0.1 / 8)
    assert row["reward"] == pytest.approx(-0.1 / 8)
    assert row["gap"] == pytest.approx(0.0, abs=1e-12)


def test_sim_eval_rejects_an_unknown_rate_limit(tmp_path, capsys):
    trace = tmp_path / "flat.txt"
    trace.write_text("1 10\n" * 60)
    rc = main(["sim", "eval", "--trace", str(trace), "--rate-limit", "bogus"])
    assert rc != 0
    assert "--rate-limit" in capsys.readouterr().err
