"""Routed pipelines on the GPU simulator: a later stage's arrivals are the stage before's
completions at their finish time, drops anywhere are chain violations, and the chain's end-to-end
latency covers every stage."""

import numpy as np
import pytest

from testbed.errors import ConfigError
from testbed.load.trace import Trace
from testbed.profiles import default_profiles
from testbed.scaler.fa2 import Pipeline
from testbed.scaler.factory import make_policy
from testbed.scaler.loop import ScalerLoop
from testbed.sim.gpu import GpuSimCluster

PROFILES = default_profiles()
CHAIN = Pipeline(("imgcls", "tts"), 3000.0)


def _day(rate_fn, seconds=1800):
    counts = np.array([rate_fn(t) for t in range(seconds)], dtype=np.int64)
    return Trace("t", np.ones(seconds, dtype=np.int64), counts)


def _traces(seconds=1800):
    rng = np.random.default_rng(5)
    base = {s: _day(lambda t, r=rng: int(r.poisson(30 + 25 * np.sin(t / 150))), seconds)
            for s in ("chatbot", "imgcls")}
    base["tts"] = _day(lambda t: 500, seconds)  # a trace the chain must ignore
    return base


RATIOS = {"chatbot": 0.15, "imgcls": 0.4, "tts": 0.15}


def _run(cluster, steps=None, policy="rule_v2"):
    pols = {s: make_policy(policy, s, total_units=cluster.total_units()) for s in cluster.services()}
    loop = ScalerLoop(cluster, pols, cluster.latest_window, clock=lambda: cluster.now)
    windows = []
    n = 0
    while not cluster.done and (steps is None or n < steps):
        windows.append(cluster.advance())
        for s in cluster.services():
            loop.decide(s)
        n += 1
    return windows


def test_routing_conserves_requests_at_their_finish_times():
    cluster = GpuSimCluster(PROFILES, _traces(), RATIOS, gpus=2, seed=2, chains=[CHAIN])
    windows = _run(cluster)
    log = cluster.chain_log[0]
    imgcls_done = ~np.isnan(log.finish[0])
    at_tts = ~np.isnan(log.arrival[1])
    # every tts arrival is an imgcls completion, at the very time imgcls finished it
    assert at_tts.any()
    assert not (at_tts & ~imgcls_done).any()
    assert np.array_equal(log.arrival[1, at_tts], log.finish[0, at_tts])
    # and every imgcls completion before the end reached tts (none lost, none invented)
    before_end = imgcls_done & (log.finish[0] < cluster.now)
    assert np.array_equal(at_tts, before_end)
    tts_arrivals = sum(w["tts"].arrivals for w in windows)
    assert tts_arrivals == int(at_tts.sum())  # tts's own trace (500/s) is not served
    # per period: what reached tts in a period finished at imgcls inside that period
    fin = log.finish[0, at_tts]
    per_period = np.bincount((fin // cluster.step_seconds).astype(int), minlength=len(windows))
    assert [w["tts"].arrivals for w in windows] == per_period[: len(windows)].tolist()


def test_a_first_stage_that_drops_everything_violates_every_chain_request():
    cluster = GpuSimCluster(PROFILES, _traces(600), RATIOS, gpus=2, seed=2, chains=[CHAIN])
    for inst in cluster.sims["imgcls"].instances:
        inst.ready_at = 1e9  # never ready: every batch is dropped
    windows = _run(cluster, policy="static")
    (res,) = cluster.chain_results()
    offered = sum(w["imgcls"].arrivals for w in windows)
    assert res["requests"] == res["dropped"] > 0
    assert res["dropped"] == offered - len(cluster.sims["imgcls"]._carry)
    assert res["violation_rate"] == 1.0 and res["completed"] == res["on_time"] == 0
    assert res["dropped_per_stage"] == [res["dropped"], 0]
    assert sum(w["tts"].arrivals for w in windows) == 0


def test_end_to_end_latency_covers_every_stage_and_late_requests_count():
    cluster = GpuSimCluster(PROFILES, _traces(), {**RATIOS, "imgcls": 1.2}, gpus=1, seed=4,
                            chains=[CHAIN])
    _run(cluster)
    log = cluster.chain_log[0]
    done = ~np.isnan(log.finish[-1]) & (log.finish[-1] <= cluster.now)
    assert done.sum() > 100
    e2e = log.finish[-1, done] - log.arrival[0, done]
    stages = (log.finish[:, done] - log.arrival[:, done]).sum(axis=0)
    assert np.all(e2e >= stages - 1e-9)
    assert np.all(stages > 0)
    (res,) = cluster.chain_results()
    late = int(np.count_nonzero(e2e * 1000.0 > 3000.0 + 1e-3))
    assert res["late"] == late and res["completed"] == int(done.sum())
    assert res["violation_rate"] == pytest.approx((late + res["dropped"]) / res["requests"])
    assert res["mean_e2e_ms"] == pytest.approx(1000.0 * e2e.mean())


def test_a_service_outside_the_chain_is_served_as_without_one():
    # room for everyone (the services share the free units) and no interference: only the
    # routing can change what chatbot and the chain's head see
    traces = _traces()
    plain = GpuSimCluster(PROFILES, traces, RATIOS, gpus=64, seed=1, interference=False)
    routed = GpuSimCluster(PROFILES, traces, RATIOS, gpus=64, seed=1, interference=False,
                           chains=[CHAIN])
    a, b = _run(plain), _run(routed)
    assert [w["chatbot"] for w in a] == [w["chatbot"] for w in b]
    assert [w["imgcls"] for w in a] == [w["imgcls"] for w in b]  # the chain's head too


def test_a_chain_needs_no_trace_for_its_later_stages():
    traces = _traces()
    del traces["tts"]
    cluster = GpuSimCluster(PROFILES, traces, {"chatbot": 0.15, "imgcls": 0.4}, gpus=2,
                            chains=[CHAIN])
    _run(cluster, steps=10)
    assert cluster.chain_results()[0]["completed"] > 0


@pytest.mark.parametrize(
    ("chains", "where"),
    [([Pipeline(("imgcls", "ocr"), 3000)], "pipelines[0].services[1]: unknown service 'ocr'"),
     ([Pipeline(("imgcls", "tts"), 3000), Pipeline(("tts",), 2000)],
      "pipelines[1].services[0]: tts is already a stage of pipelines[0]"),
     ([Pipeline(("imgcls", "imgcls"), 3000)], "pipelines[0].services[1]: imgcls is already")],
)
def test_a_bad_chain_is_one_error_naming_the_field(chains, where):
    with pytest.raises(ConfigError, match=r"cfg\.yaml: " + where.replace("[", r"\[").replace("]", r"\]")):
        GpuSimCluster(PROFILES, _traces(), RATIOS, gpus=2, chains=chains, source="cfg.yaml")
