"""Records survive the trip to JSONL and back with every field."""

import json
from dataclasses import fields

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
