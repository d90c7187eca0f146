"""A testbed's way of reading the simulator's periods (testbed.sim.measure) and the testbed effects
SimOptions can switch on: each against a case worked by hand, and the default left as it was."""

from dataclasses import replace

import numpy as np
import pytest

from testbed.load.trace import Trace
from testbed.profiles import ServiceProfile, default_profiles
from testbed.scaler.policies import RuleV2
from testbed.sim.cluster import DEFAULT_OPTIONS, TESTBED_OPTIONS, SimCluster, SimOptions, with_measure
from testbed.sim.measure import (
    MEASURES,
    Measurement,
    Period,
    ScrapeCounter,
    integral_utilization,
    scraped_utilization,
)
from testbed.sim.service import SimInstance
from testbed.train.evaluate import evaluate


def _period(t1, arrivals, finish, owner, replicas, held=None, counts_starting=False):
    return Period(0.0, t1, np.asarray(arrivals, float), np.asarray(finish, float),
                  np.asarray(owner), held or [[] for _ in replicas], replicas, 1, counts_starting)


def test_the_integral_is_the_busy_time_over_the_replicas_in_rotation():
    one = [SimInstance(ready_at=0.0)]
    assert integral_utilization(_period(2.0, [0.0, 1.0], [0.5, 1.25], [0, 0], one)) == 0.375
    # a second replica ready at 1 s counts from then (0.5 + 0.25 / 2) / 2, or, counted while it
    # starts, as the pods in phase Running are, from 0 (0.5 / 2 + 0.25 / 2) / 2
    two = [SimInstance(ready_at=0.0), SimInstance(ready_at=1.0)]
    p = _period(2.0, [0.0, 1.0], [0.5, 1.25], [0, 0], two)
    assert integral_utilization(p) == pytest.approx(0.3125)
    p.counts_starting = True
    assert integral_utilization(p) == pytest.approx(0.1875)
    # overlapping requests on one replica are busy once; what it held at t0 is busy from t0
    held = _period(2.0, [0.2, 0.3], [0.6, 0.9], [0, 0], one, held=[[0.1]])
    assert integral_utilization(held) == pytest.approx((0.1 + 0.7) / 2)


def test_a_scraped_gauge_reads_each_replica_at_its_own_phase():
    r = SimInstance(ready_at=0.0, scrape_phase=0.3)
    # in flight over [0.2, 0.5) and [2.0, 2.4): the scrapes at 0.3, 1.3, 2.3 read 1, 0, 1
    p = _period(3.0, [0.2, 2.0], [0.5, 2.4], [0, 0], [r])
    assert scraped_utilization(p, drift=0.0) == pytest.approx(2 / 3)
    r.scrape_phase = 0.6  # 0.6, 1.6, 2.6: all idle
    assert scraped_utilization(p, drift=0.0) == 0.0
    # a replica created at 1 s (starting) adds its two idle scrapes' mean, 0, and counts in the
    # denominator as a Running pod
    starting = SimInstance(ready_at=5.0, created_at=1.0, scrape_phase=0.3)
    p = _period(3.0, [0.2, 2.0], [0.5, 2.4], [0, 0], [SimInstance(ready_at=0.0, scrape_phase=0.3),
                                                        starting], counts_starting=True)
    assert scraped_utilization(p, drift=0.0) == pytest.approx(1 / 3)


def test_increase_counts_what_ends_between_the_first_and_the_last_scrape():
    counter = ScrapeCounter(slo_s=0.5, drift=0.0)
    r = SimInstance(ready_at=0.0, scrape_phase=0.5)
    # ends at 0.2 (before the first scrape, 0.5: lost), 10 (counted), 29.7 (after the last, 29.5:
    # lost), 31 (the next period's), and one refused at 12 (a violation)
    a = [0.1, 9.0, 12.0, 29.0, 29.5]
    f = [0.2, 10.0, np.nan, 29.7, 31.0]
    c = counter.count(Period(0.0, 30.0, np.array(a), np.array(f), np.zeros(5, int),
                             [[]], [r], 1, False))
    assert (c.served, c.refused, c.slow) == (1, 1, 1)  # the one of 1 s is slow
    assert c.requests == round(2 * 30 / 29)
    nxt = counter.count(Period(30.0, 60.0, np.empty(0), np.empty(0), np.empty(0, int),
                               [[]], [r], 1, False))
    assert (nxt.served, nxt.slow, nxt.latency_sum_s) == (1, 1, pytest.approx(1.5))


def _constant_cluster(measurement, seconds=300):
    # a request at each whole second, served in 100 ms by one replica
    prof = ServiceProfile(name="svc", capacity=1, proc_time_ms=(100, 100), slo_ms=1000,
                          startup_ms=1000, queue_limit=3)
    return SimCluster({"svc": prof}, {"svc": Trace.constant(1, seconds)}, {"svc": 1.0},
                      options=replace(DEFAULT_OPTIONS, spacing="even", measurement=measurement))


def test_the_simulator_reads_its_periods_the_measurements_way():
    """The same requests read three ways: on the second (the simulator's: always just before a
    request, 0), integrated (0.1) and at the replica's scrape phase (busy if it falls in the
    first 100 ms of a second)."""
    assert _constant_cluster(None).advance()["svc"].utilization == 0.0
    assert _constant_cluster(Measurement("integral")).advance()["svc"].utilization == pytest.approx(0.1)
    for seed_phase in (0.05, 0.5):
        c = _constant_cluster(Measurement("scraped"))
        c.sims["svc"].instances[0].scrape_phase = seed_phase
        assert c.advance()["svc"].utilization == (1.0 if seed_phase < 0.1 else 0.0)


def test_harness_leaves_the_options_and_drafas_reads_as_the_drafas_testbed():
    assert with_measure(DEFAULT_OPTIONS, "harness") is DEFAULT_OPTIONS
    drafas = with_measure(TESTBED_OPTIONS, "drafas")
    assert drafas.measurement == MEASURES["drafas"].measurement
    assert drafas.measurement.utilization == "scraped" and drafas.measurement.slo_window == "scrape"
    assert drafas.measurement.counts_starting is True and drafas.measurement.phase_drift == 1e-3
    with pytest.raises(ValueError, match="unknown way of measuring 'x'; known: harness, drafas"):
        with_measure(DEFAULT_OPTIONS, "x")


def _hours(options, hours=3, seed=0):
    from testbed.profiles.paper import DEFAULT_RATIOS, SERVICES
    from testbed.traces import packaged_traces
    from testbed.train.evaluate import test_day_traces

    traces = {s: t.window(0, 11 * 3600, hours * 3600) for s, t in
              test_day_traces(packaged_traces()).items()}
    profiles = {s: p.replace(rate_limit=None, startup_max_ms=None) for s, p in default_profiles().items()}
    return evaluate({s: RuleV2.for_service(s) for s in SERVICES}, traces, DEFAULT_RATIOS, seed=seed,
                    profiles=profiles, options=options)


def test_the_simulators_own_reading_one_period_at_a_time_is_the_default_to_the_bit():
    """Measurement() (the simulator's reading) goes the per-period numpy path a measurement takes:
    it gives the default's figures to the bit, so a measurement's difference is its own."""
    plain, stepped = _hours(TESTBED_OPTIONS), _hours(replace(TESTBED_OPTIONS, measurement=Measurement()))
    for s in plain:
        assert (plain[s].reward, plain[s].slo_violation_rate, plain[s].instances) == (
            stepped[s].reward, stepped[s].slo_violation_rate, stepped[s].instances)


def test_drafas_changes_what_rule_v2_sees():
    harness, drafas = _hours(TESTBED_OPTIONS), _hours(with_measure(TESTBED_OPTIONS, "drafas"))
    assert any(harness[s].reward != drafas[s].reward for s in harness)


def test_random_balancing_keeps_the_request_sizes_and_spreads_the_requests():
    prof = ServiceProfile(name="svc", capacity=1, proc_time_ms=(60, 80), slo_ms=500,
                          startup_ms=1000, queue_limit=11, initial_replicas=2)
    def run(balancing):
        c = SimCluster({"svc": prof}, {"svc": Trace.constant(10, 600)}, {"svc": 1.0},
                       options=replace(TESTBED_OPTIONS, balancing=balancing))
        c.advance()
        chunk = c.sims["svc"]._chunk
        return c.sims["svc"].proc_s, chunk.owner
    rr_sizes, rr_owner = run("round-robin")
    rnd_sizes, rnd_owner = run("random")
    assert np.array_equal(rr_sizes, rnd_sizes)
    assert np.array_equal(rr_owner, np.arange(len(rr_owner)) % 2)
    assert not np.array_equal(rnd_owner, rr_owner) and 0.35 < rnd_owner.mean() < 0.65
    with pytest.raises(ValueError, match="balancing"):
        SimCluster({"svc": prof}, {"svc": Trace.constant(10, 60)}, {"svc": 1.0},
                   options=replace(TESTBED_OPTIONS, balancing="least"))


def test_interference_stretches_by_the_replicas_on_the_same_gpu():
    """Six replicas on 8 units spread three and three over the two GPUs: each has two
    neighbours, each pressing InSS's term at a 25 % share."""
    p = default_profiles()
    profiles = {s: p[s].replace(initial_replicas=3) for s in ("chatbot", "imgcls")}
    traces = {s: Trace.constant(1, 120) for s in profiles}
    c = SimCluster(profiles, traces, dict.fromkeys(profiles, 1.0),
                   options=replace(DEFAULT_OPTIONS, interference=True))
    c.advance()
    gpus = [i.gpu for s in c.sims.values() for i in s.instances]
    assert sorted(gpus) == [0, 0, 0, 1, 1, 1]
    curve = p["imgcls"].gpu
    cache, dram = curve.pressure(25.0)
    expected = 1 + 2 * (curve.interference[0] * cache + curve.interference[1] * dram)
    assert all(i.stretch == pytest.approx(expected) for s in c.sims.values() for i in s.instances)
    assert SimOptions().interference is False


def test_a_jittered_scrape_reads_the_time_mean_on_average():
    """Scrapes at random instants of their seconds read the 100 ms of each second busy about a
    tenth of the time, whatever the replica's phase."""
    c = _constant_cluster(Measurement("scraped", scrape_jitter=1.0), seconds=1200)
    c.sims["svc"].instances[0].scrape_phase = 0.5  # on its phase alone: always idle
    reads = [c.advance()["svc"].utilization for _ in range(39)]
    assert 0.05 < float(np.mean(reads)) < 0.15 and max(reads) < 0.4
