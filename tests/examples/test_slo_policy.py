"""The policy protocol's example (examples/policies/slo_policy.py, README "Simulator and scaler"):
a policy that reads its window's p95 latency and its service's SLO scales the example ASR
service on the simulator, and each window it saw carries what the protocol promises."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from testbed.load.trace import load_trace
from testbed.profiles import load_profiles
from testbed.scaler.factory import make_policy
from testbed.train.evaluate import evaluate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(policy_name: str, seen: list | None = None, **options):
    profiles = load_profiles(EXAMPLES / "asr" / "asr.yaml")
    policy = make_policy(policy_name, "asr", total_units=8, profiles=profiles, base_dir=EXAMPLES,
                         options=options)
    if seen is not None:
        observe = policy.observe
        policy.observe = lambda w: (seen.append(w), observe(w))
    trace = load_trace(EXAMPLES / "asr" / "asr-day.txt")
    return evaluate({"asr": policy}, {"asr": trace}, {"asr": 1.0}, total_units=8,
                    profiles={"asr": profiles["asr"]})["asr"]


def test_the_example_policy_keeps_p95_under_the_slo_it_reads_from_the_window():
    seen: list = []
    own = run("policies.slo_policy:SloPolicy", seen)
    kept_at_one: list = []
    static = run("policies.slo_policy:SloPolicy", kept_at_one, high=1e9)  # never scales out
    assert own.slo_violation_rate < static.slo_violation_rate / 4, (own, static)
    assert own.instances > 1.2  # it scaled: the peak needs more than one replica
    assert {w.slo_ms for w in seen} == {800.0} and seen[0].profile.name == "asr"
    served = [w for w in seen if w.p95_latency_ms is not None]
    assert len(served) > len(seen) / 2
    for w in served:
        assert w.p50_latency_ms <= w.p95_latency_ms <= w.p99_latency_ms
        assert w.dropped is not None  # measured on every window a policy observes
        assert w.mean_proc_time_ms == w.mean_latency_ms  # the old name reads the new field
    # the percentiles are the window's own: the windows past the SLO are those of a high p99
    late = [w for w in served if w.slo_violation_rate > 0.05 and not w.dropped]
    assert all(w.p99_latency_ms > 800 * 0.9 for w in late), [w.p99_latency_ms for w in late]
    # one replica through the peak fills its queue: those windows drop, and admit fewer than arrive
    full = [w for w in kept_at_one if w.dropped]
    assert full and all(w.admitted < w.arrivals for w in full)
    assert np.median([w.p50_latency_ms for w in served]) < 800


def test_without_the_upload_a_slow_uplink_does_not_scale_it_out():
    """A window whose p95 is 900 ms against an 800 ms SLO, 500 ms of it the requests' upload
    (a fade on the UE's slice): the policy reading the latency as it is scales out; told
    `without_upload` it holds, the service's own 400 ms being well under the SLO."""
    from testbed.metrics.window import WindowMetrics
    from testbed.scaler.actions import action_index

    profile = load_profiles(EXAMPLES / "asr" / "asr.yaml")["asr"]
    window = WindowMetrics("asr", 30.0, 90, 90, 20, 0.5, 2, mean_latency_ms=700.0,
                           p95_latency_ms=900.0, mean_upload_ms=500.0).with_profile(profile)
    mask = np.ones(5, dtype=bool)
    acts = []
    for args in ({}, {"without_upload": True}):
        policy = make_policy("policies.slo_policy:SloPolicy", "asr", total_units=8,
                             base_dir=EXAMPLES, options=args)
        policy.observe(window)
        acts.append(policy.act(np.zeros(30), mask))
    assert acts == [action_index(1), action_index(0)]
    assert window.mean_service_latency_ms == 200.0
