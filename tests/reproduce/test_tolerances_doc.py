"""docs/tolerances.md says what the judges do: the reports' rule lines word for word, and the
paper's figures beside each tolerance as testbed/profiles/paper.py has them."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.profiles.paper import PAPER_TABLES, TABLE_5_4
from testbed.reproduce import slicing, tables

DOC = Path(__file__).resolve().parents[2] / "docs" / "tolerances.md"


@pytest.mark.parametrize("line", slicing.rule_text() + tables.rule_text())
def test_every_rule_the_reports_print_is_in_the_doc_word_for_word(line):
    assert f"- {line}\n" in DOC.read_text()


@pytest.mark.parametrize("key", ["5.1", "5.2", "5.3"])
def test_the_simulator_tables_paper_rewards_and_tolerances(key):
    text = DOC.read_text()
    for s in ("chatbot", "imgcls", "tts"):
        drl = PAPER_TABLES[key].results["drl"][s].reward
        rule = PAPER_TABLES[key].results["rule_v2"][s].reward
        rule_tol = tables.SIM_RULE_51_REWARD_REL if key == "5.1" else tables.SIM_REWARD_REL
        row = (f"| {key} | {s} | {drl:.4f} | ±{tables.SIM_REWARD_REL:.0%} | {rule:.4f} | "
               f"±{rule_tol:.0%} |")
        assert row in text


def test_table54_paper_figures():
    text = DOC.read_text()
    for s, policies in TABLE_5_4.items():
        for p, c in policies.items():
            name = "DRL" if p == "ppo" else "rule v2"
            assert f"| {s} | {name} | {c['reward']:.4f} | {c['slo_violation_rate']:.4f} |" in text


def test_readme_and_the_slicing_page_link_it():
    root = DOC.parents[1]
    assert "docs/tolerances.md" in (root / "README.md").read_text()
    assert "tolerances.md" in (root / "docs" / "slicing.md").read_text()
