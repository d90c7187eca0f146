"""Rule v1/v2 decisions (Algorithms 2 and 4), HPA-like and random baselines, the state layout."""

import numpy as np
import pytest

from testbed.errors import ConfigError
from testbed.metrics.window import WindowMetrics
from testbed.scaler.actions import action_mask
from testbed.scaler.factory import make_policy
from testbed.scaler.policies import HpaPolicy, RandomPolicy, RuleV1, RuleV2
from testbed.scaler.state import StateBuilder, latest


def obs(util: float, slo: float, instances: int = 2, room: int = 4) -> np.ndarray:
    completed = 10_000
    w = WindowMetrics("svc", 30.0, completed, completed, round(slo * completed), util, instances)
    return StateBuilder(max_rate=100).push(w, action_mask(instances, room, 1, 0), instances, room)


@pytest.mark.parametrize(("util", "delta"), [(0.9, 2), (0.81, 1), (0.6, 0), (0.3, -1), (0.1, -2)])
def test_rule_v1_chatbot_thresholds(util, delta):
    assert RuleV1.for_service("chatbot").act(obs(util, 0.0), (1, 1, 1, 1, 1)) == delta + 2


@pytest.mark.parametrize(
    ("util", "slo", "delta"),
    [
        (0.95, 0.0, 1),  # high utilization alone
        (0.5, 0.09, 1),  # high SLO violation alone
        (0.2, 0.0, -1),  # both low
        (0.2, 0.01, 0),  # utilization low but violations not low enough
        (0.5, 0.0, 0),
    ],
)
def test_rule_v2_chatbot_thresholds(util, slo, delta):
    assert RuleV2.for_service("chatbot").act(obs(util, slo), (1, 1, 1, 1, 1)) == delta + 2


def test_hpa_scales_toward_target():
    hpa = HpaPolicy(total_units=8, target=0.5, replicas=2)
    assert hpa.act(obs(1.0, 0.0, instances=2), (1, 1, 1, 1, 1)) == 4  # 2 -> 4 replicas
    assert hpa.act(obs(0.5, 0.0, instances=2), (1, 1, 1, 1, 1)) == 2


def test_random_picks_only_valid_actions():
    p = RandomPolicy(3)
    picks = {p.act(obs(0.5, 0.0), (0, 0, 1, 1, 0)) for _ in range(50)}
    assert picks == {2, 3}


def test_state_layout_and_normalisation():
    sb = StateBuilder(max_rate=10)
    w = WindowMetrics("svc", 30.0, 600, 600, 6, 0.5, 2)  # 20 req/s > max: capped
    o = sb.push(w, (1, 1, 1, 1, 1), 2, 6)
    assert o.shape == (30,) and o.dtype == np.float32
    assert latest(o, "unit_cost") == 1.0  # 8 units by default: the paper's training pool
    assert latest(o, "request_rate") == 1.0
    assert latest(o, "slo_violation_rate") == pytest.approx(0.01)
    assert latest(o, "instances") == 0.25  # 2 of the 2 + 6 it could have
    assert latest(o, "action_mask") == 1.0
    o2 = sb.push(WindowMetrics("svc", 30.0, 30, 30, 0, 0.1, 3), (0, 1, 1, 1, 1), 3, 8)
    assert latest(o2, "utilization") == pytest.approx(0.1)
    assert o2[5 + 3] == pytest.approx(0.5)  # previous utilization shifted one slot older


def test_state_is_free_of_the_cluster_size():
    """The same service state at 8 units and at 16x the units and load reads the same."""
    small, large = StateBuilder.for_service("imgcls"), StateBuilder.for_service("imgcls")
    mask = (1, 1, 1, 1, 1)
    o8 = small.push(WindowMetrics("imgcls", 30.0, 30 * 20, 600, 3, 0.7, 2), mask, 2, 4)
    o128 = large.push(WindowMetrics("imgcls", 30.0, 30 * 320, 9600, 48, 0.7, 32), mask, 32, 64)
    np.testing.assert_allclose(o8, o128)  # without the unit-cost cue (both default to 8 units)
    cue = StateBuilder.for_service("imgcls").push(
        WindowMetrics("imgcls", 30.0, 30 * 320, 9600, 48, 0.7, 32), mask, 32, 64, 128
    )
    np.testing.assert_allclose(cue[:-5], o128[:-5])
    assert latest(cue, "unit_cost") == pytest.approx(8 / 128)
    # 20 req/s on two imgcls instances (14.3 req/s each flat out): load 0.7, over MAX_LOAD 2
    assert latest(o8, "request_rate") == pytest.approx(20 / (2 * 1000 / 70) / 2)
    assert latest(o8, "instances") == pytest.approx(2 / 6)


def test_unknown_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown policy"):
        make_policy("nope", "chatbot", total_units=8)
