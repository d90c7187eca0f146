"""Rule v1/v2 decisions (Algorithms 2 and 4), HPA-like and random baselines, the state layout."""

import numpy as np
import pytest

from testbed.errors import ConfigError
from testbed.metrics.window import WindowMetrics
from testbed.scaler.actions import action_mask
from testbed.scaler.policies import HpaPolicy, RandomPolicy, RuleV1, RuleV2, make_policy
from testbed.scaler.state import StateBuilder, latest


def obs(util: float, slo: float, instances: int = 2, total: int = 8) -> np.ndarray:
    completed = 10_000
    w = WindowMetrics("svc", 30.0, completed, completed, round(slo * completed), util, instances)
    return StateBuilder(max_rate=100).push(w, action_mask(instances, 4, 1, 0), instances, total)


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
    hpa = HpaPolicy(total_units=8, target=0.5)
    assert hpa.act(obs(1.0, 0.0, instances=2), (1, 1, 1, 1, 1)) == 4  # 2 -> 4 replicas
    assert hpa.act(obs(0.5, 0.0, instances=2), (1, 1, 1, 1, 1)) == 2


def test_random_picks_only_valid_actions():
    p = RandomPolicy(3)
    picks = {p.act(obs(0.5, 0.0), (0, 0, 1, 1, 0)) for _ in range(50)}
    assert picks == {2, 3}


def test_state_layout_and_normalisation():
    sb = StateBuilder(max_rate=10)
    w = WindowMetrics("svc", 30.0, 600, 600, 6, 0.5, 2)  # 20 req/s > max: capped
    o = sb.push(w, (1, 1, 1, 1, 1), 2, 8)
    assert o.shape == (25,) and o.dtype == np.float32
    assert latest(o, "request_rate") == 1.0
    assert latest(o, "slo_violation_rate") == pytest.approx(0.01)
    assert latest(o, "instances") == 0.25
    assert latest(o, "action_mask") == 1.0
    o2 = sb.push(WindowMetrics("svc", 30.0, 30, 30, 0, 0.1, 3), (0, 1, 1, 1, 1), 3, 8)
    assert latest(o2, "utilization") == pytest.approx(0.1)
    assert o2[5 + 3] == pytest.approx(0.5)  # previous utilization shifted one slot older


def test_unknown_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown policy"):
        make_policy("nope", "chatbot", total_units=8)
