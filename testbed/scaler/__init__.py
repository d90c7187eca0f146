"""The scaling brain: action mask and adjustment, state, policies and the control loop."""

from testbed.scaler.actions import ACTIONS, action_mask, adjust_action, mask_code, reward
from testbed.scaler.factory import make_policy
from testbed.scaler.loop import Decision, ScalerLoop
from testbed.scaler.policies import HpaPolicy, Policy, RandomPolicy, RuleV1, RuleV2, StaticPolicy
from testbed.scaler.registry import register_policy
from testbed.scaler.state import StateBuilder

__all__ = [
    "ACTIONS",
    "Decision",
    "HpaPolicy",
    "Policy",
    "RandomPolicy",
    "RuleV1",
    "RuleV2",
    "ScalerLoop",
    "StateBuilder",
    "StaticPolicy",
    "action_mask",
    "adjust_action",
    "make_policy",
    "mask_code",
    "register_policy",
    "reward",
]
