"""Gymnasium adapter: one service on the simulator as an RL environment (Section 4.4.3).

Needs `gymnasium` (the `drl` extra); the simulator itself does not.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

from testbed.load.trace import Trace
from testbed.profiles import ServiceProfile, default_profiles
from testbed.profiles.paper import HISTORY, TOTAL_UNITS
from testbed.scaler.actions import ACTIONS, action_mask, adjust_action, next_cooldown, reward
from testbed.scaler.state import N_METRICS, StateBuilder
from testbed.sim.cluster import SimCluster


class ScalingEnv(gym.Env):
    """Observation: 30 floats in [0, 1]; action: Discrete(5) = -2..+2 replicas; reward: Eq. 3.2.

    Each episode replays one trace (picked at random from `traces`) until it ends (truncated).
    With `randomize_free_units`, in half of the steps the free units the agent sees are drawn
    between 0 and the real free units, standing in for other services competing for the pool
    (Section 4.4.3; the published simulator draws in half of the calls, simpy_env.py:303-306).

    With `scales`, each episode draws its pool size from them and multiplies the request ratio by
    that size over `total_units`, so the load per unit stays the one of `ratio` at `total_units`
    while an instance's price in the reward (1/units) changes; the observation's unit-cost metric
    tells the agent which pool it is in.
    """

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium's convention)

    def __init__(
        self,
        service: str,
        traces: Sequence[Trace],
        ratio: float,
        *,
        total_units: int = TOTAL_UNITS,
        randomize_free_units: bool = True,
        profile: ServiceProfile | None = None,
        scales: Sequence[int] | None = None,
    ):
        super().__init__()
        self.service = service
        self.traces = list(traces)
        self.ratio = ratio
        self.total_units = total_units
        self.base_units = total_units
        self.scales = list(scales) if scales else None
        self.randomize_free_units = randomize_free_units
        self.profile = profile or default_profiles()[service]
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(N_METRICS * HISTORY,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(len(ACTIONS))
        self._cluster: SimCluster | None = None
        self._state = StateBuilder.for_service(service)
        self._mask = (0, 0, 1, 0, 0)
        self._cooldown = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        trace = self.traces[int(self.np_random.integers(len(self.traces)))]
        if self.scales:
            self.total_units = int(self.scales[int(self.np_random.integers(len(self.scales)))])
        ratio = self.ratio * self.total_units / self.base_units
        self._cluster = SimCluster(
            {self.service: self.profile},
            {self.service: trace},
            {self.service: ratio},
            total_units=self.total_units,
            seed=int(self.np_random.integers(2**31)),
        )
        self._state.reset()
        self._cooldown = 0
        window = self._cluster.advance()[self.service]
        obs = self._observe(window)
        return obs, {}

    def step(self, action: int):
        cluster = self._cluster
        assert cluster is not None, "call reset() first"
        delta = adjust_action(ACTIONS[int(action)], self._mask)
        if not self._mask[delta + 2]:
            delta = 0
        if delta:
            cluster.scale(self.service, cluster.desired_replicas(self.service) + delta)
        self._cooldown = next_cooldown(self._cooldown, delta)
        window = cluster.advance()[self.service]
        r = reward(window.slo_violation_rate, cluster.desired_replicas(self.service), self.total_units)
        obs = self._observe(window)
        return obs, r, False, cluster.done, {"window": window, "applied": delta}

    def action_masks(self) -> np.ndarray:
        return np.asarray(self._mask, dtype=bool)

    def _observe(self, window) -> np.ndarray:
        cluster = self._cluster
        units = cluster.units_per_replica(self.service)
        free = cluster.free_units()
        if self.randomize_free_units and self.np_random.random() < 0.5:
            free = int(self.np_random.integers(0, free + 1))
        n = cluster.desired_replicas(self.service)
        self._mask = action_mask(n, free, units, self._cooldown)
        return self._state.push(window, self._mask, n, free // max(units, 1), self.total_units)

    def close(self) -> None:
        self._cluster = None
