"""The state builder's observation: the last `history` rows, metric-major, past its ring's wrap."""

import numpy as np

from testbed.metrics.window import WindowMetrics
from testbed.scaler.actions import action_mask
from testbed.scaler.state import HISTORY, N_METRICS, StateBuilder


def test_observation_is_the_last_rows_metric_major_across_resets_and_the_ring_wrap():
    rng = np.random.default_rng(0)
    sb = StateBuilder(2.0)
    rows: list[tuple[float, ...]] = []
    for t in range(2600):  # the ring holds 1024 periods past the history: it wraps twice
        if t in (700, 701, 2100):
            sb.reset()
            rows = []
        w = WindowMetrics("svc", 30.0, int(rng.integers(0, 400)), int(rng.integers(1, 400)),
                          int(rng.integers(0, 40)), float(rng.random()), 2)
        inst = int(rng.integers(1, 8))
        mask = action_mask(inst, 8 - inst, 1, int(rng.integers(0, 3)))
        rows.append(sb.row(w, mask, inst, 8 - inst, 8))
        obs = sb.push(w, mask, inst, 8 - inst, 8)
        last = ([rows[0]] * HISTORY + rows)[-HISTORY:]  # the first row repeats until there are enough
        want = np.asarray(last, dtype=np.float32).T.reshape(-1)
        assert obs.dtype == np.float32 and obs.shape == (N_METRICS * HISTORY,)
        assert obs.tobytes() == want.tobytes(), t
    obs[:] = -1.0  # a new array each push: the caller may keep or change it
    assert sb.push(w, mask, inst, 8 - inst, 8).min() >= 0.0


def test_a_service_outside_the_package_gets_its_rate_per_instance_from_its_profile():
    from testbed.profiles import ServiceProfile, default_profiles
    from testbed.scaler.state import instance_rps

    asr = ServiceProfile(name="asr", capacity=1, queue_limit=11, proc_time_ms=(150, 250),
                         startup_ms=5000, slo_ms=800)
    assert instance_rps("asr") is None  # the registry does not know it
    w = WindowMetrics("asr", 30.0, 75, 75, 0, 0.5, 1)  # 2.5 req/s on one instance of 5 req/s
    mask = action_mask(1, 7, 1, 0)
    rate = StateBuilder.for_profile(asr).row(w, mask, 1, 7)[0]
    assert rate == 2.5 / 5.0 / 2.0  # load per instance over MAX_LOAD, not over the trace maximum
    # the paper's services: the same number from the profile in use as from the registry
    for name, profile in default_profiles().items():
        assert StateBuilder.for_profile(profile).instance_rps == StateBuilder.for_service(name).instance_rps
