"""Algorithm 1 (mask), Eq. 3.1 (mask code), Algorithm 3 (adjustment) and Eq. 3.2 (reward)."""

import itertools

import pytest

from testbed.scaler.actions import action_mask, adjust_action, mask_code, next_cooldown, reward


@pytest.mark.parametrize(
    ("instances", "free", "cooldown", "expected"),
    [
        (1, 0, 0, (0, 0, 1, 0, 0)),
        (1, 1, 0, (0, 0, 1, 1, 0)),
        (1, 5, 0, (0, 0, 1, 1, 1)),
        (2, 5, 0, (0, 1, 1, 1, 1)),
        (3, 5, 0, (1, 1, 1, 1, 1)),
        (3, 5, 2, (0, 0, 1, 1, 1)),
        (4, 1, 0, (1, 1, 1, 1, 0)),
        (4, 0, 1, (0, 0, 1, 0, 0)),
    ],
)
def test_mask_truth_table(instances, free, cooldown, expected):
    assert action_mask(instances, free, 1, cooldown) == expected


def test_mask_counts_free_units_in_instances_of_this_service():
    assert action_mask(3, 3, 2, 0) == (1, 1, 1, 1, 0)  # 3 units fit one 2-unit instance


def test_mask_code_eq_3_1():
    assert mask_code((1, 1, 1, 1, 1)) == 1.0
    assert mask_code((0, 0, 1, 0, 0)) == pytest.approx(4 / 31)
    assert mask_code((1, 0, 0, 0, 0)) == pytest.approx(16 / 31)


# Algorithm 3, line by line: (action, mask) -> adjusted action
@pytest.mark.parametrize(
    ("action", "mask", "expected"),
    [
        (-2, (0, 1, 1, 1, 1), -1),
        (-2, (0, 0, 1, 1, 1), 0),
        (-2, (1, 1, 1, 1, 1), -2),
        (-1, (1, 0, 1, 1, 1), 0),
        (2, (1, 1, 1, 1, 0), 1),
        (2, (1, 1, 1, 0, 0), 0),
        (1, (1, 1, 1, 0, 0), 0),
        (1, (1, 1, 1, 1, 0), 1),
        (0, (0, 0, 1, 0, 0), 0),
    ],
)
def test_adjustment_truth_table(action, mask, expected):
    assert adjust_action(action, mask) == expected


def test_adjusted_action_is_always_valid_for_masks_from_algorithm_1():
    for n, free, cd in itertools.product(range(1, 6), range(0, 4), (0, 3)):
        mask = action_mask(n, free, 1, cd)
        for a in range(-2, 3):
            assert mask[adjust_action(a, mask) + 2] == 1


def test_cooldown_blocks_six_decisions_after_scale_up():
    cd = next_cooldown(0, 1)
    blocked = 0
    while action_mask(3, 4, 1, cd)[1] == 0:
        blocked += 1
        cd = next_cooldown(cd, 0)
    assert blocked == 6


def test_reward_matches_table_5_1_rule_based_chatbot():
    assert reward(0.0034, 2.0104, 8) == pytest.approx(-0.0282, abs=1e-4)
