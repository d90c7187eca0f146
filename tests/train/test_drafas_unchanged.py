"""Tables 5.1-5.3 run on the DRAFAS simulator, which issue 15 left untouched: the figures of
`testbed sim tables` / `sim eval` are the ones recorded before the GPU path was added (commit
3a66122), to the last bit; and the GPU path in DRAFAS's configuration (25 % slices, batch 1, no
interference) gives the same rule v2 figures on the test day."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.profiles import default_profiles, paper
from testbed.scaler.loop import ScalerLoop
from testbed.scaler.policies import make_policy
from testbed.sim.gpu import GpuSimCluster
from testbed.train.evaluate import evaluate
from testbed.train.evaluate import test_day_traces as day_traces

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"

# (units, policy, service) -> (steps, SLO violation rate, instances, processing time, reward)
RECORDED = {
    (8, "rule_v2", "chatbot"): (2880, 0.0, 2.296527777777778, 0.2831798543203753, -0.0287065972222211),
    (8, "rule_v2", "imgcls"): (2880, 0.0, 1.8652777777777778, 0.07004170642357445, -0.023315972222223147),
    (8, "rule_v2", "tts"): (2880, 0.0005985184792642542, 2.3361111111111112, 0.26243713499152543,
                            -0.02974005552022743),
    (8, "hpa", "chatbot"): (2880, 0.0, 2.534375, 0.2814833618449017, -0.03167968749999931),
    (8, "hpa", "imgcls"): (2880, 0.0, 2.3409722222222222, 0.07001308308402059, -0.029262152777779278),
    (8, "hpa", "tts"): (2880, 0.0005985184792642542, 2.4291666666666667, 0.2623815235722787,
                        -0.030903249964671708),
    (128, "rule_v2", "chatbot"): (400, 0.030733569349837092, 17.5825, 0.388100852143393,
                                  -0.04139654053985324),
    (128, "rule_v2", "imgcls"): (400, 0.009272283157904834, 6.46, 0.0799002825879301, -0.013391929842114519),
    (128, "rule_v2", "tts"): (400, 0.0568365681265464, 37.9, 0.45371632881742596, -0.08076228631389153),
}

pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason="shared traces not present")


@pytest.mark.parametrize(("units", "policy"), [(8, "rule_v2"), (8, "hpa"), (128, "rule_v2")])
def test_tables_figures_are_the_recorded_ones(units, policy):
    table = paper.TABLE_5_1 if units == 8 else paper.PAPER_TABLES["5.3"]
    pols = {s: make_policy(policy, s, total_units=units) for s in paper.SERVICES}
    out = evaluate(pols, day_traces(TRACES), table.ratios, total_units=units, seed=0,
                   max_steps=None if units == 8 else 400)
    for s, r in out.items():
        got = (r.steps, r.slo_violation_rate, r.instances, r.proc_time, r.reward)
        assert got == RECORDED[units, policy, s], s


def test_the_gpu_path_in_drafas_configuration_gives_table_5_1s_rule_v2_figures():
    cluster = GpuSimCluster(default_profiles(), day_traces(TRACES), paper.TABLE_5_1.ratios, gpus=2,
                            seed=0, interference=False)
    pols = {s: make_policy("rule_v2", s, total_units=8) for s in paper.SERVICES}
    loop = ScalerLoop(cluster, pols, cluster.latest_window, clock=lambda: cluster.now)
    sums = {s: [0.0, 0.0, 0.0] for s in pols}
    for _ in range(2880):
        cluster.advance()
        for d in loop.decide_all():
            acc = sums[d.service]
            acc[0] += d.slo_violation_rate
            acc[1] += d.replicas_before
            acc[2] += d.reward
    for s, (slo, inst, rew) in sums.items():
        _, ref_slo, ref_inst, _, ref_rew = RECORDED[8, "rule_v2", s]
        assert (slo / 2880, inst / 2880) == (ref_slo, ref_inst), s
        assert rew / 2880 == pytest.approx(ref_rew, abs=1e-15), s
