"""The oracle: its DP against brute force, a hand-checked cooldown case, and the per-count table."""

import itertools

import numpy as np
import pytest

from testbed.load.trace import Trace
from testbed.profiles import ServiceProfile
from testbed.scaler.actions import ACTIONS, action_mask, next_cooldown
from testbed.scaler.policies import StaticPolicy
from testbed.train.evaluate import evaluate
from testbed.train.oracle import best_schedule, oracle, static_slo_table


def brute_force(slo: np.ndarray, cap: int, units: int = 8) -> float:
    """Best mean reward over every action sequence the mask allows (the DP's specification)."""
    steps = slo.shape[0]
    best = -np.inf
    for seq in itertools.product(ACTIONS, repeat=steps - 1):
        n, cool, total, ok = 1, 0, 0.0, True
        for t in range(steps):
            total -= 0.9 * slo[t, n - 1] + 0.1 * n / units
            if t == steps - 1:
                break
            delta = seq[t]
            if not action_mask(n, cap - n, 1, cool)[delta + 2]:
                ok = False
                break
            n, cool = n + delta, next_cooldown(cool, delta)
        if ok:
            best = max(best, total / steps)
    return best


@pytest.mark.parametrize("seed", range(8))
def test_dp_equals_brute_force_on_four_steps(seed):
    rng = np.random.default_rng(seed)
    # violation rates that fall with the count, as a real table does, plus noise
    slo = np.clip(rng.uniform(0, 1, (4, 1)) / np.arange(1, 6) + rng.uniform(-0.05, 0.05, (4, 5)), 0, 1)
    result = best_schedule(slo, max_instances=5)
    assert result.reward == pytest.approx(brute_force(slo, 5))
    assert result.schedule[0] == 1
    recomputed = np.mean([-(0.9 * slo[t, n - 1] + 0.1 * n / 8) for t, n in enumerate(result.schedule)])
    assert result.reward == pytest.approx(recomputed)


def test_cooldown_keeps_the_extra_instance_after_a_scale_up():
    slo = np.zeros((4, 3))
    slo[1, 0] = 1.0  # one instance fails step 1 only
    result = best_schedule(slo, max_instances=3)
    # scaling up once costs 2 instances for the rest of the day (scale-down is blocked), still
    # far cheaper than one step at 100 % violations
    assert result.schedule == (1, 2, 2, 2)
    assert result.reward == pytest.approx(-(0.0125 + 3 * 0.025) / 4)
    assert brute_force(slo, 3) == pytest.approx(result.reward)


def test_plus_two_is_used_when_one_more_is_not_enough():
    slo = np.zeros((3, 4))
    slo[1, :2] = 1.0  # step 1 needs three instances
    assert best_schedule(slo, max_instances=4).schedule == (1, 3, 3)
    assert best_schedule(slo, max_instances=2).schedule[1] == 1  # no room: scaling buys nothing


def test_caps_bound_each_step_and_only_cost_reward():
    slo = np.zeros((5, 4))
    slo[2:4, :2] = 1.0  # steps 2-3 need three instances
    free = best_schedule(slo, max_instances=4)
    assert free.schedule[2:4] == (3, 3)
    caps = np.array([4, 4, 2, 2, 4])  # another service holds two units while step 2-3 peak
    capped = best_schedule(slo, max_instances=4, caps=caps)
    assert all(n <= c for n, c in zip(capped.schedule, caps, strict=True))
    assert capped.reward < free.reward
    # with two instances at most, the peak is lost whatever the schedule: 100 % on steps 2-3
    assert capped.slo_violation_rate == pytest.approx(2 / 5)
    assert best_schedule(slo, max_instances=4, caps=np.full(5, 4)).reward == pytest.approx(free.reward)
    with pytest.raises(ValueError):
        best_schedule(slo, max_instances=4, caps=np.array([4, 4]))


def _profile() -> ServiceProfile:
    return ServiceProfile(name="svc", capacity=1, proc_time_ms=(500.0, 500.0), slo_ms=1000.0,
                          startup_ms=10_000.0, queue_limit=2)


def test_static_table_closed_form():
    # 3 req/s at 0.5 s each: one instance serves 2/s and drops the rest; two never queue
    slo = static_slo_table(_profile(), Trace.constant(3, 300), 1.0, 4, steps=10)
    assert slo.shape == (10, 4)
    assert (slo[1:, 0] > 0.3).all()
    assert not slo[:, 1:].any()


def test_oracle_is_at_least_any_static_count():
    trace = Trace("wave", np.ones(3000), 3 + 2 * np.sin(np.arange(3000) / 300.0))
    prof = _profile()
    best = oracle(prof, trace, 1.0, total_units=8)
    static = evaluate({"svc": StaticPolicy()}, {"svc": trace}, {"svc": 1.0}, profiles={"svc": prof})
    assert best.reward >= static["svc"].reward - 1e-12
    assert best.reward > static["svc"].reward  # the wave needs a second instance at its peaks
    assert 1 < best.instances < 3


def test_the_share_bound_on_the_drawn_request_sizes_is_tighter_and_no_policy_beats_it():
    from testbed.profiles import default_profiles, paper
    from testbed.train.compare import TableLoad, bounds_for, comparison_policies, run_policy
    from testbed.train.oracle import share_bound

    profiles = default_profiles()
    services = list(paper.SERVICES)
    counts = (40 + 30 * np.sin(np.arange(3600) / 300)).astype(np.int64)
    day = Trace("d", np.ones(3600, dtype=np.int64), counts)
    traces = dict.fromkeys(services, day)
    ratios = {s: 3 * r for s, r in paper.TABLE_5_1.ratios.items()}
    bounds = bounds_for(profiles, traces, ratios, gpus=2, services=services)
    for s in services:  # every request at the fastest draw: a looser bound
        assert bounds[s] < share_bound(profiles[s], day, ratios[s], total_units=8).reward
    for name in ("fa2", "gslice", "rule_v2"):
        pols = comparison_policies(name, services, profiles, total_units=8, models=None)
        r = run_policy(name, pols, profiles, traces, TableLoad("", 2, ratios), bounds=bounds)
        for s, v in r.per_service.items():
            assert v["reward"] <= v["bound"], (name, s)
