"""Records survive the trip to JSONL and back with every field."""

import json
from dataclasses import fields

from testbed.clock import ScenarioClock
from testbed.load.records import RecordWriter, RequestRecord, read_records


def test_json_has_every_field_and_round_trips(tmp_path):
    rec = RequestRecord("tts", "embb", 7, 1700000000.1234567, 1700000000.125, 12.3456789, 14.0004,
                        200, 244, 488689, None)
    doc = json.loads(rec.to_json())
    assert set(doc) == {f.name for f in fields(RequestRecord)}
    with RecordWriter(tmp_path / "r.jsonl") as w:
        w.write(rec)
        w.write(RequestRecord("tts", None, 8, 1.0, 1.5, 0.0, 500.0, 0, 244, 0, "timeout"))
    back = read_records(tmp_path / "r.jsonl")
    assert back[0].latency_ms == 12.346 and back[0].sent == 1700000000.125 and back[0].slice == "embb"
    assert back[1].error == "timeout" and back[1].lateness_ms == 500.0 and back[1].slice is None


def test_scenario_time_compresses_only_the_replicas_own_time():
    """At time scale 4 a request of 30 ms wall, 20 of them in the emulated replica, took 20 x 4 in
    the replica and 10 on the network: 90 ms of scenario time, not 120. A real service's record
    (no server time) scales whole, and time scale 1 leaves every record as measured."""
    emulated = {"latency_ms": 30.0, "server_ms": 20.0}
    real = {"latency_ms": 30.0, "server_ms": None}
    assert ScenarioClock(4).scenario_ms_of(emulated) == 90.0
    assert ScenarioClock(4).scenario_ms_of(real) == 120.0
    assert ScenarioClock(4).scenario_ms_of({"latency_ms": 30.0}) == 120.0  # records written before server_ms
    assert ScenarioClock(1).scenario_ms_of(emulated) == ScenarioClock(1).scenario_ms_of(real) == 30.0
    rec = RequestRecord("imgcls", None, 1, 1.0, 1.0, 30.0, 30.0, 200, 10, 10, None, server_ms=20.0)
    assert ScenarioClock(4).scenario_ms_of(json.loads(rec.to_json())) == 90.0
