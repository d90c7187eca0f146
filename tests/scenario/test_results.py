"""Result rows from replica reports: what the replicas ran against what was set for them."""

from __future__ import annotations

from testbed.profiles import default_profiles
from testbed.scenario.results import SLO_MS, replica_row


def probe(t, share, batch, stretch, *, share_set=None, batch_set=None, stretch_set=None, **extra):
    return {"t": t, "service": "imgcls", "replica": "imgcls-1", "gpu": 0,
            "share": share, "batch": batch, "stretch": stretch,
            "share_set": share if share_set is None else share_set,
            "batch_set": batch if batch_set is None else batch_set,
            "stretch_set": stretch if stretch_set is None else stretch_set, **extra}


def decision(t, share, batch):
    return {"t": t, "service": "imgcls", "target": {"replicas": 1, "share_pct": share, "batch": batch,
                                                   "gpus": None}}


def test_reports_against_the_cluster_and_the_policys_last_target():
    probes = [
        probe(15.0, 25.0, 1, 1.0625),  # before any decision: no target to compare with
        probe(30.0, 35.0, 4, 1.0),  # the target of t=15 reached the replica
        probe(45.0, 35.0, 4, 1.0, stretch_set=1.1),  # the cluster's stretch did not arrive
        probe(60.0, 35.0, 4, 1.0),  # the policy asked for 50 % at t=45: the replica still runs 35
        {**probe(60.0, None, None, None), "error": "timeout"},
    ]
    decisions = [decision(15.0, 35.0, 4), decision(30.0, 35.0, 4), decision(45.0, 50.0, 4)]
    row = replica_row(probes, decisions)
    assert row["replica_probes"] == 5
    assert row["config_mismatches"] == 2  # the lost stretch and the silent replica
    assert row["target_mismatches"] == 1  # checked 3, one wrong
    assert row["mean_share_pct"] == (25 + 35 * 3) / 4
    assert row["max_stretch"] == 1.0625 and row["mean_batch"] == (1 + 4 * 3) / 4


def test_no_reports_and_drafas_policies_give_no_figures_rather_than_zeros():
    assert replica_row([], [])["config_mismatches"] is None
    rule = replica_row([probe(15.0, 25.0, 1, 1.1), probe(30.0, 25.0, 1, 1.1)],
                       [{"t": 15.0, "service": "imgcls", "target": None}])
    assert rule["config_mismatches"] == 0 and rule["target_mismatches"] is None
    assert rule["mean_stretch"] == 1.1


def test_reports_read_the_slo_thresholds_the_scaler_reads():
    # one home: services.yaml; the result rows' fallback table is read from it, not typed again
    assert {name: p.slo_ms for name, p in default_profiles().items()} == SLO_MS
    assert SLO_MS["imgcls"] == 500.0  # dissertation Table 4.4
