"""The action space (-2..+2), Algorithm 1's valid-action mask, Eq. 3.1's mask code, Algorithm 3's
adjustment and Eq. 3.2's reward: the rules every policy and backend share."""

from __future__ import annotations

import itertools

from testbed.profiles.paper import COOLDOWN_STEPS, REWARD_ALPHA, REWARD_BETA

ACTIONS = (-2, -1, 0, 1, 2)  # index i of the Discrete(5) space means ACTIONS[i] replicas
Mask = tuple[int, int, int, int, int]


def action_index(delta: int) -> int:
    """The action index (0..4) of a change of `delta` replicas (-2..+2)."""
    return delta + 2


def action_delta(index: int) -> int:
    """The replica change (-2..+2) of action `index` (0..4)."""
    return ACTIONS[index]


def action_mask(instances: int, free_units: int, units_per_instance: int, cooldown: int) -> Mask:
    """Algorithm 1: at least one instance; scale-up only into free units; no scale-down during
    the cooldown after a scale-up. Free units are counted in instances of this service.

    instances: the service's instances; free_units: units no service holds; units_per_instance: what
    one instance of it takes; cooldown: decisions left in the cooldown."""
    down = cooldown <= 0
    room = free_units // max(units_per_instance, 1)
    return (  # conditionals, not int(bool): built on every decision
        1 if down and instances > 2 else 0,
        1 if down and instances > 1 else 0,
        1,
        1 if room > 0 else 0,
        1 if room > 1 else 0,
    )


def _code(mask: Mask) -> float:
    return (mask[0] << 4 | mask[1] << 3 | mask[2] << 2 | mask[3] << 1 | mask[4]) / 0b11111


# every mask action_mask can build: the state builder looks its code up once per decision
_CODES = {m: _code(m) for m in itertools.product((0, 1), repeat=5)}


def mask_code(mask: Mask) -> float:
    """Eq. 3.1: the mask as a 5-bit number (action -2 in the high bit) divided by 0b11111."""
    try:
        return _CODES[mask]
    except (KeyError, TypeError):  # a list, an array or other values: not one of the tuples above
        return _code(mask)


def adjust_action(delta: int, mask: Mask) -> int:
    """Algorithm 3: shrink a blocked +-2 to +-1 when that is allowed, otherwise do nothing.

    delta: the proposed change, -2..+2; mask: the period's action mask."""
    if delta == -2 and not mask[0]:
        return -1 if mask[1] else 0
    if delta == -1 and not mask[1]:
        return 0
    if delta == 2 and not mask[4]:
        return 1 if mask[3] else 0
    if delta == 1 and not mask[3]:
        return 0
    return delta


def next_cooldown(cooldown: int, applied_delta: int) -> int:
    """After a scale-up, scale-down stays blocked for the next COOLDOWN_STEPS decisions.

    cooldown: decisions left before this one; applied_delta: the change this decision applied."""
    return COOLDOWN_STEPS if applied_delta > 0 else max(0, cooldown - 1)


def reward(
    slo_violation_rate: float,
    instances: int,
    total_units: int,
    alpha: float = REWARD_ALPHA,
    beta: float = REWARD_BETA,
) -> float:
    """Eq. 3.2: -(alpha * SLO violation rate + beta * instances / total units).

    slo_violation_rate: the period's; instances: the service's; total_units: the cluster's; alpha,
    beta: the weights (Table 4.6)."""
    return -(alpha * slo_violation_rate + beta * instances / total_units)
