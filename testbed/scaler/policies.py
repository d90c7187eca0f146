"""Scaling policies: rule-based v1/v2 (Algorithms 2 and 4), static, HPA-like and random.

A policy maps (observation, action mask) to an action index 0..4 (ACTIONS[i] = -2..+2 replicas)
and may define `observe(window)` to read the newest WindowMetrics by name before each decision.
It knows nothing of the simulator, the Gymnasium env or the cluster; the control loop applies
Algorithm 3 to whatever it returns. Maskable PPO lives in `testbed.scaler.ppo` (needs torch); the
registry that builds a policy by name or `module:Class` in `testbed.scaler.registry`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from testbed.profiles import ServiceProfile, default_profiles
from testbed.profiles.registry import profile_for
from testbed.scaler.actions import Mask, action_index
from testbed.scaler.state import latest_index

# where the newest utilization and SLO violation rate sit in an observation (rules read them per step)
_UTIL = latest_index("utilization")
_SLO = latest_index("slo_violation_rate")


@runtime_checkable
class Policy(Protocol):
    """What the control loop asks of a policy: `act` returns an action index 0..4 (ACTIONS[i] =
    -2..+2 replicas) that the mask allows. Optionally `observe(window)`: the loop calls it with the
    newest `WindowMetrics` just before `act`. A policy that sets `adjust_masked = True` (the paper's
    rules, which propose +-2 whatever the mask) may return a masked index: Algorithm 3 adjusts it;
    for any other, a masked index is a PolicyError."""

    name: str

    def act(self, observation: np.ndarray, action_mask: Mask) -> int:
        """The action for the newest period. observation: the 30 normalised values
        (StateBuilder's layout); action_mask: the five actions' 0/1 mask (Algorithm 1)."""
        ...


def policy_name(policy: object) -> str:
    """What results and decisions call a policy: the reference it was built from (`module:Class`,
    as a scenario's rows and `expect:` name it; set by the registry as `testbed_label`), else its
    `name`, else its class's name (an object of one's own may leave `name` out)."""
    label = getattr(policy, "testbed_label", None)
    return str(label if isinstance(label, str) else getattr(policy, "name", type(policy).__name__))


_Rule = TypeVar("_Rule", bound="_ProfileRule")


class _ProfileRule:
    """A rule whose thresholds are a service profile's `rule:` (`for_profile`, per rule)."""

    @classmethod
    def for_profile(cls: type[_Rule], profile: ServiceProfile) -> _Rule:
        """The rule with the thresholds of `profile`'s `rule:`."""
        raise NotImplementedError

    @classmethod
    def for_service(cls: type[_Rule], service: str,
                    profiles: dict[str, ServiceProfile] | None = None) -> _Rule:
        """`for_profile` of `service` in `profiles` (default: the service registry's)."""
        return cls.for_profile(profile_for(profiles if profiles is not None else default_profiles(),
                                           service))


@dataclass
class RuleV1(_ProfileRule):
    """Algorithm 2: instance utilization against four thresholds (Table 4.9 defaults)."""

    inst_util_high_2: float
    inst_util_high_1: float
    inst_util_low_1: float
    inst_util_low_2: float
    name: str = "rule_v1"
    adjust_masked: ClassVar[bool] = True  # Algorithm 3 adjusts what the mask refuses

    @classmethod
    def for_profile(cls, profile: ServiceProfile) -> RuleV1:
        """The thresholds of the profile's `rule:` (the paper's services: Table 4.9)."""
        return cls(**profile.rule.v1())

    def act(self, observation: np.ndarray, action_mask: Mask) -> int:
        """Algorithm 2 on the newest period. observation: the 30 normalised values (StateBuilder's
        layout); action_mask: the five actions' 0/1 mask (Algorithm 1). Returns an index into
        ACTIONS."""
        util = float(observation[_UTIL])
        if util > self.inst_util_high_2:
            delta = 2
        elif util > self.inst_util_high_1:
            delta = 1
        elif util < self.inst_util_low_2:
            delta = -2
        elif util < self.inst_util_low_1:
            delta = -1
        else:
            delta = 0
        return action_index(delta)


@dataclass
class RuleV2(_ProfileRule):
    """Algorithm 4: scale up on high SLO violation OR high utilization, down when both are low
    (Table 4.10 defaults)."""

    slo_high: float
    slo_low: float
    inst_util_high: float
    inst_util_low: float
    name: str = "rule_v2"
    adjust_masked: ClassVar[bool] = True  # Algorithm 3 adjusts what the mask refuses

    @classmethod
    def for_profile(cls, profile: ServiceProfile) -> RuleV2:
        """The thresholds of the profile's `rule:` (the paper's services: Table 4.10)."""
        return cls(**profile.rule.v2())

    def act(self, observation: np.ndarray, action_mask: Mask) -> int:
        """Algorithm 4 on the newest period. observation: the 30 normalised values (StateBuilder's
        layout); action_mask: the five actions' 0/1 mask (Algorithm 1). Returns an index into
        ACTIONS."""
        slo = float(observation[_SLO])
        util = float(observation[_UTIL])
        if slo > self.slo_high or util > self.inst_util_high:
            return action_index(1)
        if slo < self.slo_low and util < self.inst_util_low:
            return action_index(-1)
        return action_index(0)


@dataclass
class StaticPolicy:
    """Never scales: the service keeps the replicas it started with."""

    name: str = "static"
    adjust_masked: ClassVar[bool] = True  # Algorithm 3 adjusts what the mask refuses

    def act(self, observation: np.ndarray, action_mask: Mask) -> int:
        """Always hold. observation: the 30 normalised values (StateBuilder's layout); action_mask: the
        five actions' 0/1 mask (Algorithm 1). Returns an index into ACTIONS."""
        return action_index(0)


@dataclass
class HpaPolicy:
    """Kubernetes-HPA-like: desired = ceil(n * utilization / target), 10 % tolerance, +-2 per step.

    The control loop sets `replicas` (n) before each decision."""

    total_units: int
    target: float = 0.6
    tolerance: float = 0.1
    name: str = "hpa"
    adjust_masked: ClassVar[bool] = True  # Algorithm 3 adjusts what the mask refuses
    replicas: int = 1

    def act(self, observation: np.ndarray, action_mask: Mask) -> int:
        """Kubernetes HPA's rule on the newest utilization. observation: the 30 normalised values
        (StateBuilder's layout); action_mask: the five actions' 0/1 mask (Algorithm 1).
        Returns an index into ACTIONS."""
        util = float(observation[_UTIL])
        n = max(1, self.replicas)
        ratio = util / self.target
        if abs(ratio - 1.0) <= self.tolerance:
            return action_index(0)
        delta = max(-2, min(2, math.ceil(n * ratio) - n))
        return action_index(delta)


class RandomPolicy:
    """Uniform over the valid actions (a baseline the trained agent must beat)."""

    name = "random"

    def __init__(self, seed: int = 0):
        self._rng = np.random.default_rng(seed)

    def act(self, observation: np.ndarray, action_mask: Mask) -> int:
        """A seeded random allowed action. observation: the 30 normalised values (StateBuilder's layout);
        action_mask: the five actions' 0/1 mask (Algorithm 1). Returns an index into ACTIONS."""
        valid = np.flatnonzero(np.asarray(action_mask))
        return int(self._rng.choice(valid))
