"""Table 5.4's judge: mean and run-to-run sd over repetitions, tolerance, the DRL-vs-rule check."""

from __future__ import annotations

import pytest

from testbed.profiles.paper import TABLE_5_4
from testbed.reproduce.tables import TB_REWARD_ABS, testbed_table


def _row(service, policy, reward, slo, rep):
    return {"service": service, "policy": policy, "reward": reward, "slo_violation_rate": slo,
            "mean_replicas": 2.0, "mean_latency_ms": 300.0, "rep": rep}


def test_cells_are_means_over_repetitions_with_their_sd():
    paper = TABLE_5_4["imgcls"]["rule_v2"]
    rows = [_row("imgcls", "rule_v2", paper["reward"] + d, paper["slo_violation_rate"], i)
            for i, d in enumerate((-0.001, 0.0, 0.001))]
    (cell,) = testbed_table(rows, window="test").cells
    assert cell.runs == 3 and cell.ours["reward"] == pytest.approx(paper["reward"])
    assert cell.sd["reward"] == pytest.approx(0.001)
    assert cell.ours["proc_time_s"] == pytest.approx(0.3)
    assert cell.passed


def test_a_cell_outside_the_tolerance_fails_and_says_by_how_much():
    paper = TABLE_5_4["chatbot"]["rule_v2"]
    rows = [_row("chatbot", "rule_v2", paper["reward"] - 3 * TB_REWARD_ABS, 0.0036, 0)]
    (cell,) = testbed_table(rows, window="test").cells
    assert not cell.passed and "reward -0.0150" in cell.why


def test_drl_worse_than_rule_where_the_paper_has_it_better_is_a_failed_check():
    rows = [_row("imgcls", "ppo", -0.05, 0.0, 0), _row("imgcls", "rule_v2", -0.03, 0.0, 0)]
    table = testbed_table(rows, window="test")
    (check,) = table.checks
    assert "imgcls" in check[0] and check[1] is False
    assert not table.passed
