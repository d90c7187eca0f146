"""Table 5.4's judge: mean and run-to-run sd over repetitions, tolerance, the DRL-vs-rule check."""

from __future__ import annotations

import pytest

from testbed.judge.outcome import FAIL, NOT_RUN, PASS
from testbed.profiles.paper import TABLE_5_4
from testbed.reproduce.tables import TB_REWARD_ABS, TB_SLO_ABS, testbed_table


def _row(service, policy, reward, slo, rep):
    return {"service": service, "policy": policy, "reward": reward, "slo_violation_rate": slo,
            "mean_replicas": 2.0, "mean_latency_ms": 300.0, "rep": rep}


def test_cells_are_means_over_repetitions_with_their_sd():
    paper = TABLE_5_4["imgcls"]["rule_v2"]
    rows = [_row("imgcls", "rule_v2", paper["reward"] + d, paper["slo_violation_rate"], i)
            for i, d in enumerate((-0.001, 0.0, 0.001))]
    (cell,) = testbed_table(rows, window="test", duration_s=86400, repetitions=2).cells
    assert cell.runs == 3 and cell.ours["reward"] == pytest.approx(paper["reward"])
    assert cell.sd["reward"] == pytest.approx(0.001)
    assert cell.ours["proc_time_s"] == pytest.approx(0.3)
    assert cell.passed


def test_a_cell_outside_the_tolerance_fails_and_says_by_how_much():
    paper = TABLE_5_4["chatbot"]["rule_v2"]
    rows = [_row("chatbot", "rule_v2", paper["reward"] - 3 * TB_REWARD_ABS, 0.0036, 0)]
    (cell,) = testbed_table(rows, window="test", duration_s=86400, repetitions=2).cells
    assert not cell.passed and "reward -0.0150" in cell.why


def test_drl_worse_than_rule_where_the_paper_has_it_better_is_a_failed_check():
    rows = [_row("imgcls", "ppo", -0.05, 0.0, 0), _row("imgcls", "rule_v2", -0.03, 0.0, 0)]
    table = testbed_table(rows, window="test", duration_s=86400, repetitions=2)
    (check,) = table.checks
    assert "imgcls" in check.text and check.passed is False
    assert table.verdict == FAIL


def _paper(key, policy, service):
    from testbed.profiles.paper import PAPER_TABLES

    r = PAPER_TABLES[key].results["drl" if policy == "ppo" else "rule_v2"][service]
    return {"slo_violation_rate": r.slo_violation_rate, "instances": r.instances,
            "proc_time_s": r.proc_time_s, "reward": r.reward}


@pytest.mark.parametrize(("key", "policy", "reward_off", "instances_off", "passes"), [
    ("5.1", "rule_v2", 0.029, 0.0, True),
    ("5.1", "rule_v2", 0.031, 0.0, False),  # Table 5.1's rule cells: 3 % of the reward
    ("5.1", "rule_v2", 0.0, 0.051, False),  # ... and 5 % of the instances
    ("5.1", "ppo", 0.14, 0.3, True),  # every other cell: 15 % of the reward only
    ("5.2", "rule_v2", -0.16, 0.0, False),
    ("5.3", "ppo", 0.149, 0.0, True),
])
def test_simulator_cells_are_judged_by_issue_11s_floors(key, policy, reward_off, instances_off,
                                                        passes):
    from testbed.reproduce.tables import _judged_sim_cell

    paper = _paper(key, policy, "imgcls")
    ours = dict(paper, reward=paper["reward"] * (1 - reward_off),
                instances=paper["instances"] * (1 + instances_off))
    cell = _judged_sim_cell(key, policy, "imgcls", ours, paper)
    assert cell.passed is passes
    assert passes or "tolerance" in cell.why


def test_a_table54_cell_outside_the_slo_tolerance_fails():
    paper = TABLE_5_4["imgcls"]["rule_v2"]
    rows = [_row("imgcls", "rule_v2", paper["reward"], paper["slo_violation_rate"] + 2 * TB_SLO_ABS,
                 0)]
    table = testbed_table(rows, window="test", duration_s=86400, repetitions=1)
    (cell,) = table.cells
    assert not cell.passed and "slo_violation_rate +0.0100" in cell.why
    assert table.verdict == FAIL


def _both(ppo, rule):
    return [_row(s, p, r, TABLE_5_4[s][p]["slo_violation_rate"], i)
            for s in ("chatbot", "imgcls", "tts") for p, r in (("ppo", ppo), ("rule_v2", rule))
            for i in range(2)]


def test_table54_on_a_short_window_is_not_run_and_says_what_decides_it():
    # at the quick size (120 s, one run) DRL and rule v2 give the same reward: start-up; the
    # day-long figures are not judged (NOT RUN at this size), never an UNDECIDED that passes
    table = testbed_table(_both(-0.05, -0.05), window="test", duration_s=120, repetitions=1)
    assert table.verdict == NOT_RUN
    # ten times off the paper: still not judged against it at this size, never a pass
    table = testbed_table(_both(-0.5, -0.5), window="test", duration_s=120, repetitions=1)
    assert table.verdict == NOT_RUN
    said = " ".join(table.undecided_by())
    assert "--t54-duration 86400" in said and "at least 1200 s, 2 repetitions" in said


def test_table54_at_the_full_size_decides_drl_against_rule_v2():
    # 20 minutes, 2 runs: DRL worse than rule v2 where the paper has it better is a FAIL even
    # though the cells beside the paper need the whole day
    table = testbed_table(_both(-0.06, -0.03), window="test", duration_s=1200, repetitions=2)
    assert table.verdict == FAIL
    table = testbed_table(_both(-0.03, -0.03), window="test", duration_s=1200, repetitions=2)
    # the ordering passes; the cells beside the paper are NOT RUN at this size, listed apart
    assert table.verdict == PASS and table.decided_by and table.not_run()


def test_the_whole_day_within_tolerance_passes():
    rows = [_row(s, p, TABLE_5_4[s][p]["reward"], TABLE_5_4[s][p]["slo_violation_rate"], 0)
            for s in ("chatbot", "imgcls", "tts") for p in ("ppo", "rule_v2")]
    assert testbed_table(rows, window="test", duration_s=86400, repetitions=1).verdict == PASS


def test_a_reward_above_the_oracle_bound_fails_at_any_size():
    from testbed.reproduce.tables import Cell, Check, TableResult

    paper = _paper("5.1", "rule_v2", "imgcls")
    cell = Cell("imgcls", "rule_v2", dict(paper), paper, passed=True)
    table = TableResult("5.1", "t", [cell], decided_by="a larger run")
    assert table.verdict == NOT_RUN
    table.checks.append(Check("imgcls rule_v2 reward <= oracle bound", False, "-0.01 vs -0.02"))
    assert table.verdict == FAIL
