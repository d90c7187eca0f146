"""The control loop: one scaling decision per call for one service, on any ClusterBackend.

The protocol a policy follows (built in or a user's `module:Class`): `act(observation,
action_mask) -> action index` (0..4, ACTIONS[i] = -2..+2 replicas; a masked index is adjusted by
Algorithm 3, as the paper's rules rely on; anything else is a `PolicyError`), and, if the policy
defines it, `observe(window)`, called with the newest `WindowMetrics` just before each `act`, so a
policy reads the period by name (`window.queue_length`, `window.slo_violation_rate`, ...).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING

import numpy as np

from testbed.cluster.base import ClusterBackend
from testbed.errors import TestbedError
from testbed.metrics.window import WindowMetrics
from testbed.profiles import default_profiles
from testbed.scaler.actions import (
    ACTIONS,
    Mask,
    action_mask,
    adjust_action,
    next_cooldown,
    reward,
)
from testbed.scaler.policies import Policy, policy_name
from testbed.scaler.state import StateBuilder
from testbed.scaler.target import ServiceTarget, TargetPolicy, apply_target, cluster_view

if TYPE_CHECKING:
    from testbed.profiles import ServiceProfile


_LAST_ACTION = len(ACTIONS) - 1


class PolicyError(TestbedError):
    """A policy broke the protocol (an action index that is no action); one line, naming it."""


def _checked(index: object, policy: object, service: str, mask: Mask, adjusts: bool) -> int:
    """`index` if it is an action index 0..4 that the mask allows (or, for a policy that lets
    Algorithm 3 adjust it, any action index), else a PolicyError naming the policy, index and mask."""
    if (type(index) is int or isinstance(index, np.integer)) and 0 <= index < len(ACTIONS):  # type: ignore[operator]
        if adjusts or mask[index]:  # type: ignore[index]
            return index  # type: ignore[return-value]
        what = "an action the mask refuses"
    else:
        what = f"not an action index 0..{len(ACTIONS) - 1}"
    raise PolicyError(f"policy {policy_name(policy)!r} for {service}: act() returned {index!r}, {what} "
                      f"(mask {tuple(int(m) for m in mask)}: 1 = valid)")


@dataclass(slots=True)
class Decision:
    """One row of the decision log. `reward` scores the window just observed (Eq. 3.2), i.e. the
    outcome of the previous decision."""

    time: float
    service: str
    policy: str
    request_rate: float
    utilization: float
    slo_violation_rate: float
    mask: Mask
    proposed: int  # what the policy asked for, -2..+2
    applied: int  # after Algorithm 3
    replicas_before: int
    replicas_after: int
    free_units: int
    reward: float
    target: ServiceTarget | None = None  # a target policy's decision, as applied (share, batch)
    decide_ms: float = 0.0  # time the policy took to decide (a target policy: all its services)


class ScalerLoop:
    """Per service: last window -> state -> mask -> policy -> Algorithm 3 -> backend.scale.

    `metrics(service)` returns the latest period's WindowMetrics; `clock()` stamps decisions
    (simulated time in the simulator, wall time on a testbed); `profiles`: the profiles the
    services run with, whose `instance_rps` normalises the observation's request rate (without
    them, the registry's).
    """

    def __init__(
        self,
        backend: ClusterBackend,
        policies: Mapping[str, Policy | TargetPolicy],
        metrics: Callable[[str], WindowMetrics],
        *,
        clock: Callable[[], float] = time.time,
        profiles: Mapping[str, ServiceProfile] | None = None,
    ):
        self.backend = backend
        self.policies = dict(policies)
        self.metrics = metrics
        self.clock = clock
        # the observation's request rate per instance comes from the profile in use (a user's
        # file, a scenario's), the registry's only where the caller gives none
        self._states = {s: StateBuilder.for_profile(profiles[s]) if profiles and s in profiles
                        else StateBuilder.for_service(s) for s in self.policies}
        # the profile an observing policy's window carries (its SLO among it)
        self._profiles = {s: profiles[s] if profiles and s in profiles else profile_or_none(s)
                          for s in self.policies}
        self._cooldown = dict.fromkeys(self.policies, 0)
        # isinstance on a Protocol walks its members: decided once here, not on every decision
        self._targeted = {s: isinstance(p, TargetPolicy) for s, p in self.policies.items()}
        self._counted = {s: hasattr(p, "replicas") for s, p in self.policies.items()}
        # what decisions record as the policy: its `name`, else its class's (a user's policy object)
        self._names = {s: policy_name(p) for s, p in self.policies.items()}
        self._adjusts = {s: bool(getattr(p, "adjust_masked", False)) for s, p in self.policies.items()}
        # a policy's observe(window), if it has one: called with the newest window before act
        self._observe = {s: getattr(p, "observe", None) for s, p in self.policies.items()
                         if callable(getattr(p, "observe", None))}

    @property
    def observes(self) -> bool:
        """Whether a policy reads its windows by name (`observe`): a simulator measures the queue
        only then (SimBackend.measure_queue)."""
        return bool(self._observe)

    def decide_all(self) -> list[Decision]:
        """One decision per service; a target policy shared by several services plans them together."""
        out: list[Decision] = []
        done: set[str] = set()
        for service, policy in self.policies.items():
            if service in done:
                continue
            if self._targeted[service]:
                group = [s for s, p in self.policies.items() if p is policy]
                out.extend(self._decide_targets(policy, group))
                done.update(group)
            else:
                out.append(self.decide(service))
        return out

    def _decide_targets(self, policy: TargetPolicy, services: list[str]) -> list[Decision]:
        backend = self.backend
        total = backend.total_units()
        windows = {s: self.metrics(s) for s in services}
        befores = {s: backend.desired_replicas(s) for s in services}
        free = backend.free_units()
        started = time.perf_counter()
        targets = policy.plan(cluster_view(backend, windows))
        decide_ms = 1000.0 * (time.perf_counter() - started)
        out = []
        for s in services:
            window, before = windows[s], befores[s]
            mask = action_mask(before, free, backend.units_per_replica(s), 0)
            applied = apply_target(backend, s, targets[s]) if s in targets else None
            after = backend.desired_replicas(s)
            out.append(
                Decision(
                    time=self.clock(),
                    service=s,
                    policy=self._names[s],
                    request_rate=window.request_rate,
                    utilization=window.utilization,
                    slo_violation_rate=window.slo_violation_rate,
                    mask=mask,
                    proposed=(targets[s].replicas - before) if s in targets else 0,
                    applied=after - before,
                    replicas_before=before,
                    replicas_after=after,
                    free_units=free,
                    reward=reward(window.slo_violation_rate, before, total),
                    target=applied,
                    decide_ms=decide_ms,
                )
            )
        return out

    def decide(self, service: str) -> Decision:
        """One period's decision for `service`: its newest window, the policy's action (or target), the
        mask, the action applied and its reward."""
        policy = self.policies[service]
        if self._targeted[service]:
            return self._decide_targets(policy, [service])[0]  # type: ignore[arg-type]
        window = self.metrics(service)
        backend = self.backend
        total = backend.total_units()
        before = backend.desired_replicas(service)
        free = backend.free_units()
        units = backend.units_per_replica(service)
        units = units if units > 1 else 1
        cooldown = self._cooldown[service]
        mask = action_mask(before, free, units, cooldown)
        obs = self._states[service].push(window, mask, before, free // units, total)
        if self._counted[service]:
            policy.replicas = before  # a policy that needs the count (HPA) gets it here
        observe = self._observe.get(service)
        started = perf_counter()
        if observe is not None:
            observe(window.with_profile(self._profiles[service]))
        index = policy.act(obs, mask)
        adjusts = self._adjusts[service]
        if type(index) is not int or not 0 <= index <= _LAST_ACTION or not (mask[index] or adjusts):
            index = _checked(index, policy, service, mask, adjusts)  # numpy ints, and the errors
        proposed = ACTIONS[index]
        decide_ms = 1000.0 * (perf_counter() - started)
        applied = adjust_action(proposed, mask)
        if not mask[applied + 2]:  # action_index(applied)
            applied = 0  # a policy may propose anything; only valid actions reach the cluster
        if applied:
            backend.scale(service, before + applied)
        self._cooldown[service] = next_cooldown(cooldown, applied)
        seconds, completed = window.seconds, window.completed
        slo = window.violations / completed if completed else 0.0  # window.slo_violation_rate
        return Decision(
            self.clock(),
            service,
            self._names[service],
            window.arrivals / seconds if seconds > 0 else 0.0,  # window.request_rate
            window.utilization,
            slo,
            mask,
            proposed,
            applied,
            before,
            before + applied,
            free,
            reward(slo, before, total),
            None,
            decide_ms,
        )


def profile_or_none(service: str) -> ServiceProfile | None:
    """The registry's profile of `service`, None for a service it does not know."""
    return default_profiles().get(service)
