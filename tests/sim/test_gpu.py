"""The batched GPU path: DRAFAS's configuration decides as the DRAFAS simulator does, batches
close on size or wait, shares and neighbours change processing time, share changes restart."""

import numpy as np
import pytest

from testbed.cluster.base import ServiceTarget
from testbed.errors import ConfigError, StateError
from testbed.load.trace import Trace
from testbed.profiles import ServiceProfile, default_profiles
from testbed.profiles.paper import SERVICES
from testbed.scaler.factory import make_policy
from testbed.scaler.loop import ScalerLoop
from testbed.sim.cluster import SimCluster, SimOptions
from testbed.sim.gpu import GpuSimCluster

PROFILES = default_profiles()


def _day(rate_fn, seconds=1800):
    counts = np.array([rate_fn(t) for t in range(seconds)], dtype=np.int64)
    return Trace("t", np.ones(seconds, dtype=np.int64), counts)


@pytest.mark.parametrize(
    ("scale", "slo_counting", "published", "capacity"),
    [(1.0, "completion", True, 1), (2.0, "completion", True, 1), (2.0, "arrival", False, 1),
     # a replica serving four requests at once (four batches of one) at four times the load
     (8.0, "completion", False, 4)],
)
def test_drafas_configuration_serves_as_the_drafas_simulator(scale, slo_counting, published,
                                                             capacity):
    # Table 5.1's ratios and twice them (Table 5.2's kind of load, where the rate limit drops), with
    # the published simulator's rate limit, start-up jitter and completion-time SLO counting (the
    # profiles' defaults), and once counting at arrival. (Without the rate limit, in deep overload,
    # the DRAFAS simulator's multi-period chunks and its own one-period chunks count a request in
    # a neighbouring period now and then; the GPU path matches the latter: docs/seeds.md.)
    rng = np.random.default_rng(3)
    traces = {s: _day(lambda t, r=rng: int(r.poisson(40 + 30 * np.sin(t / 200))), 3000) for s in SERVICES}
    ratios = {"chatbot": 0.15 * scale, "imgcls": 0.4 * scale, "tts": 0.15 * scale}
    profiles = PROFILES if published else {s: p.replace(startup_max_ms=None) for s, p in PROFILES.items()}
    if capacity != 1:  # without the rate limit, which would hold four slots to one's admissions
        profiles = {s: p.replace(capacity=capacity, rate_limit=None) for s, p in profiles.items()}
    rows, rewards = [], []
    options = SimOptions(slo_counting=slo_counting)
    for cluster in (
        SimCluster(profiles, traces, ratios, total_units=8, seed=1, options=options),
        GpuSimCluster(profiles, traces, ratios, gpus=2, seed=1, interference=False,
                      slo_counting=slo_counting),
    ):
        pols = {s: make_policy("rule_v2", s, total_units=8) for s in SERVICES}
        loop = ScalerLoop(cluster, pols, cluster.latest_window, clock=lambda c=cluster: c.now)
        out, rew = [], []
        while not cluster.done:
            cluster.advance()
            for s in SERVICES:
                d = loop.decide(s)
                w = cluster.latest_window(s)
                out.append((d.replicas_after, d.free_units, w.arrivals, w.completed, w.violations,
                            w.utilization, w.mean_proc_time_ms or 0.0))
                rew.append(d.reward)
        rows.append(np.array(out, dtype=float))
        rewards.append(np.array(rew).reshape(-1, len(SERVICES)).mean(axis=0))
    drafas, gpu = rows
    assert drafas.shape == gpu.shape
    # period for period: the same decisions, free units, arrivals, counted and violating requests
    np.testing.assert_array_equal(drafas[:, :5], gpu[:, :5])
    np.testing.assert_allclose(drafas[:, 5], gpu[:, 5], rtol=0, atol=1e-12)  # utilization
    # mean latency: finish times are cumulative sums taken in another order (float noise, 1e-9 s)
    np.testing.assert_allclose(drafas[:, 6], gpu[:, 6], rtol=1e-7)
    np.testing.assert_allclose(rewards[0], rewards[1], rtol=0, atol=1e-12)
    assert drafas[:, 4].sum() > 0  # the loads do violate the SLO, so the counting is exercised
    if published and scale > 1:
        assert (drafas[:, 3] > 0).any()


def test_the_rate_limit_counts_a_batch_by_its_nominal_time():
    prof = PROFILES["chatbot"].replace(name="svc", proc_time_ms=(10, 10), startup_ms=0)
    limit, window = prof.rate_limit
    per_period = 30 / window
    # 20 requests/s on one batch-1 replica at 25 %: 7 per 2 s admitted, the rest dropped at once
    c = _one(prof, 20)
    out = c.advance()["svc"]
    assert c.last_outcome["svc"].served == limit * per_period
    assert out.violations == out.arrivals - limit * per_period
    # batches of 4 (full at 20/s) take batch(4) tokens each: fewer batches, more requests
    c = _one(prof, 20, initial={"svc": ServiceTarget(1, 25, 4)})
    c.advance()
    batches = int(limit / prof.gpu.batch_factor(4))
    assert c.last_outcome["svc"].served == 4 * batches * per_period
    # a half GPU is faster, so each batch takes fewer tokens
    c = _one(prof, 20, initial={"svc": ServiceTarget(1, 50, 4)})
    c.advance()
    batches = int(limit / (prof.gpu.batch_factor(4) * prof.gpu.share_factor(50)))
    assert c.last_outcome["svc"].served == 4 * batches * per_period


def test_new_replicas_start_after_whole_seconds_up_to_startup_max():
    prof = PROFILES["imgcls"].replace(name="svc")
    c = _one(prof, 1, seconds=100_000)
    delays = []
    for k in range(40):
        c.configure("svc", ServiceTarget(2 + k % 2, 25, 1))
        inst = c.sims["svc"].instances[-1]
        if inst.created_at == c.now and not inst.draining:
            delays.append(inst.ready_at - inst.created_at)
        c.advance()
    assert delays and all(float(d).is_integer() for d in delays)
    assert prof.startup_ms / 1000 <= min(delays) < max(delays) <= prof.startup_max_ms / 1000


def _one(profile, rate, seconds=120, **kw):
    return GpuSimCluster({"svc": profile}, {"svc": Trace.constant(rate, seconds)}, {"svc": 1.0}, gpus=1, **kw)


def test_a_batch_closes_when_full_or_after_its_wait():
    prof = PROFILES["imgcls"].replace(name="svc", proc_time_ms=(70, 70), startup_ms=0)
    c = _one(prof, 10, interference=False)
    c.configure("svc", ServiceTarget(1, 25, 4))
    sim = c.sims["svc"]
    c.advance()
    out = c.last_outcome["svc"]
    # one request every 0.1 s: a batch of 4 would take 0.3 s to fill, so batches close on the
    # 125 ms wait (a quarter of the 500 ms SLO) holding 2 requests each
    assert out.batches == pytest.approx(300 / 2, abs=2)
    assert sim.batch_wait_s == pytest.approx(0.125)
    c.configure("svc", ServiceTarget(1, 25, 2))
    c.advance()
    assert c.last_outcome["svc"].batches == pytest.approx(150, abs=2)
    assert c.last_outcome["svc"].on_time == c.last_outcome["svc"].counted


def test_more_share_is_faster_and_neighbours_are_slower():
    prof = PROFILES["imgcls"].replace(name="svc", proc_time_ms=(70, 70), startup_ms=0, slo_ms=10_000)
    lat = {}
    for share in (25, 50):
        c = _one(prof, 1, initial={"svc": ServiceTarget(1, share, 1)}, interference=False)
        lat[share] = c.advance()["svc"].mean_proc_time_ms
    assert lat[25] == pytest.approx(70)
    assert lat[50] == pytest.approx(70 * 0.5**0.95)
    c = _one(prof, 1, initial={"svc": ServiceTarget(3, 25, 1)})
    two_neighbours = prof.gpu.stretch([prof.gpu.pressure(25)] * 2)
    assert c.advance()["svc"].mean_proc_time_ms == pytest.approx(70 * two_neighbours)


def test_a_share_change_starts_new_replicas_beside_the_old_until_ready():
    prof = PROFILES["imgcls"].replace(name="svc", startup_ms=40_000)
    c = _one(prof, 5, initial={"svc": ServiceTarget(2, 25, 1)})
    applied = c.configure("svc", ServiceTarget(1, 50, 1))
    assert applied == ServiceTarget(1, 50, 1)
    assert c.gpu_free_pct() == [0.0]  # both old slices and the new half GPU
    assert c.desired_replicas("svc") == 1 and c.ready_replicas("svc") == 0
    c.advance()
    assert c.last_outcome["svc"].on_time > 0  # the old ones still serve
    c.advance()
    c.advance()
    assert c.gpu_free_pct() == [50.0] and c.ready_replicas("svc") == 1


def test_what_does_not_fit_is_not_applied_and_scale_says_so():
    c = _one(PROFILES["imgcls"].replace(name="svc"), 5)
    assert c.configure("svc", ServiceTarget(6, 25, 1)).replicas == 4
    with pytest.raises(StateError):
        c.scale("svc", 5)


def test_a_profile_without_the_gpu_curve_takes_only_drafas_configuration():
    prof = ServiceProfile(
        name="svc", capacity=1, queue_limit=10, proc_time_ms=(60, 80), startup_ms=0, slo_ms=500
    )
    c = _one(prof, 5)
    with pytest.raises(ConfigError, match=r"svc\.gpu: the profile has no gpu curve"):
        c.configure("svc", ServiceTarget(1, 25, 4))
