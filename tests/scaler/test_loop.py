"""ScalerLoop drives a ClusterBackend: mask, Algorithm 3 and cooldown between policy and cluster."""

from testbed.cluster.base import ClusterBackend
from testbed.load.trace import Trace
from testbed.profiles import ServiceProfile
from testbed.scaler.actions import action_index
from testbed.scaler.loop import ScalerLoop
from testbed.sim.cluster import SimCluster


class Always:
    adjust_masked = True  # proposes whatever the mask says: what Algorithm 3 does with it is tested

    def __init__(self, delta):
        self.delta = delta
        self.name = f"always{delta:+d}"

    def act(self, observation, action_mask):
        return action_index(self.delta)


def make(units=3):
    prof = ServiceProfile(name="svc", capacity=1, proc_time_ms=(100.0, 100.0), slo_ms=1000.0,
                          startup_ms=5000.0, queue_limit=10)
    c = SimCluster({"svc": prof}, {"svc": Trace.constant(2, 3600)}, {"svc": 1.0}, total_units=units)
    return c


def test_sim_cluster_is_a_cluster_backend():
    assert isinstance(make(), ClusterBackend)


def test_plus_two_is_shrunk_to_what_fits_then_blocked():
    c = make(units=2)
    loop = ScalerLoop(c, {"svc": Always(2)}, c.latest_window, clock=lambda: c.now)
    c.advance()
    d = loop.decide("svc")
    assert (d.proposed, d.applied, d.replicas_before, d.replicas_after) == (2, 1, 1, 2)
    assert c.desired_replicas("svc") == 2
    c.advance()
    d = loop.decide("svc")
    assert d.applied == 0 and d.mask[3] == 0
    assert d.reward < 0 and d.time == 60.0


def test_scale_down_waits_for_cooldown():
    c = make(units=4)
    up = ScalerLoop(c, {"svc": Always(1)}, c.latest_window)
    c.advance()
    up.decide("svc")
    loop = ScalerLoop(c, {"svc": Always(-1)}, c.latest_window)
    loop._cooldown["svc"] = 6  # as left by the scale-up
    applied = []
    for _ in range(8):
        c.advance()
        applied.append(loop.decide("svc").applied)
    assert applied == [0, 0, 0, 0, 0, 0, -1, 0]
