"""The end-of-run totals of `testbed load`: percentiles over every request, errors by kind, bytes,
and an error rate that leaves out the requests the client cancelled when stopped."""

import pytest

from testbed.load.records import RequestRecord
from testbed.load.stats import RunTotals, percentile
from testbed.scenario import results


def _rec(ms: float, error: str | None = None, up: int = 100, down: int = 1000) -> RequestRecord:
    return RequestRecord(service="imgcls", slice=None, seq=0, scheduled=0.0, sent=0.0, latency_ms=ms,
                         latency_sched_ms=ms, status=0 if error else 200, bytes_up=up,
                         bytes_down=0 if error else down, error=error)


def test_summary_over_every_request():
    t = RunTotals(slo_ms=50, clock=iter([0.0, 10.0, 10.0]).__next__)
    for ms in range(1, 101):  # 1..100 ms
        t(_rec(float(ms)))
    before = t.summary()  # interpolated between the two nearest of 100 ranks
    assert (before["p50_ms"], before["p90_ms"], before["p99_ms"], before["max_ms"]) == \
        (50.5, pytest.approx(90.1), pytest.approx(99.01), 100.0)
    t(_rec(5.0, "unreachable"))
    t(_rec(5.0, "cancelled"))
    s = t.summary()
    assert s["finished"] == 102 and s["ok"] == 100 and s["rate_per_s"] == pytest.approx(10.2)
    assert s["max_ms"] == 100.0
    assert s["errors"] == {"cancelled": 1, "unreachable": 1}
    assert s["slo_violations"] == 50 + 2  # 51..100 ms, and both failures
    assert s["bytes_sent"] == 101 * 100  # the unreachable one sent nothing
    assert s["bytes_received"] == 100 * 1000
    assert t.error_rate == pytest.approx(1 / 102)  # the cancelled one is not the service's


def test_no_request_is_no_figure():
    s = RunTotals(slo_ms=50, clock=iter([0.0, 1.0]).__next__).summary()
    assert s["finished"] == 0 and s["p50_ms"] is None and s["max_ms"] is None and s["error_rate"] == 0


def test_one_percentile_for_the_load_client_and_the_published_rows():
    assert results.percentile is percentile
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.5  # unsorted input; between ranks 2 and 3
    assert percentile([], 0.99) is None
