"""The core CLI: apply/show/list/diff/delete/render, and bad input that writes nothing."""

from __future__ import annotations

import json
import socket

import pytest

from testbed.cli import main
from testbed.core import backend

GOOD = """\
name: c
slices:
  - name: ai
    sst: 1
    sd: "000001"
    subnet: 10.45.0.0/24
  - name: be
    sst: 2
    subnet: 10.46.0.0/24
ue_groups:
  - name: ai
    slice: ai
    count: 2
  - name: be
    slice: be
    count: 1
core:
  mcc: "001"
  mnc: "01"
"""


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("TESTBED_MONGO_URI", raising=False)
    monkeypatch.setattr(backend.shutil, "which", lambda name: None)  # embedded store, always


def _file(tmp_path, text, name="tb.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _stored(tmp_path) -> int:
    if not (tmp_path / "state" / "c" / backend.EMBEDDED_DIR).exists():
        return 0
    collection, client = backend.embedded_collection(tmp_path / "state" / "c" / backend.EMBEDDED_DIR)
    try:
        return collection.count_documents({})
    finally:
        client.close()


def test_apply_twice_then_show_list_diff_delete(tmp_path, capsys):
    f = _file(tmp_path, GOOD)
    assert main(["slice", "apply", f]) == 0
    assert "3 created, 0 updated, 0 unchanged" in capsys.readouterr().out
    assert main(["slice", "apply", f]) == 0
    assert "0 created, 0 updated, 3 unchanged" in capsys.readouterr().out
    assert main(["subscriber", "show", "001010000000001", "--json", "-t", f]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["security"]["k"].startswith("hidden:") and doc["slice"][0]["sd"] == "000001"
    assert main(["subscriber", "show", "001010000000001", "--json", "--show-secrets", "-t", f]) == 0
    assert len(json.loads(capsys.readouterr().out)["security"]["k"]) == 32
    assert main(["slice", "list", "-t", f, "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["ai"]["provisioned"] == 2 and rows["be"]["provisioned"] == 1
    changed = _file(tmp_path, GOOD.replace("count: 1", "count: 1\n    five_qi: 7"), "changed.yaml")
    assert main(["slice", "diff", changed]) == 0
    assert "slice[0].session[0].qos.index" in capsys.readouterr().out
    assert main(["slice", "apply", changed, "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["summary"] == "0 created, 1 updated, 2 unchanged"
    assert plan["update"][0]["document"]["security"]["k"].startswith("hidden:")
    assert main(["subscriber", "delete", "001010000001001", "-t", f]) == 0
    assert _stored(tmp_path) == 2


def test_dry_run_writes_nothing(tmp_path, capsys):
    assert main(["slice", "apply", _file(tmp_path, GOOD), "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert len(plan["create"]) == 3 and plan["create"][0]["imsi"] == "001010000000001"
    assert _stored(tmp_path) == 0
    assert not (tmp_path / "state").exists()  # issue 13: not even an empty store directory


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BAD = [
    ("imsi 14 digits", GOOD.replace("count: 1\n", 'count: 1\n    imsi_start: "00101000000001"\n'),
     "ue_groups[1].imsi_start", "15 digits"),
    ("plmn mismatch", GOOD.replace("count: 1\n", 'count: 1\n    imsi_start: "999700000000001"\n'),
     "ue_groups[1].imsi_start", "not in PLMN 001/01"),
    ("k not hex", GOOD.replace("count: 1\n", 'count: 1\n    k: "xyz"\n    opc: "' + "0" * 32 + '"\n'),
     "ue_groups[1].k", "32 hex"),
    ("opc short", GOOD.replace("count: 1\n", 'count: 1\n    k: "' + "0" * 32 + '"\n    opc: "abc"\n'),
     "ue_groups[1].opc", "32 hex"),
    ("sst 256", GOOD.replace("sst: 2", "sst: 256"), "slices[1].sst", "255"),
    ("sd 7 digits", GOOD.replace('sd: "000001"', 'sd: "1000001"'), "slices[0].sd", "24 bits"),
    ("duplicate imsis", GOOD.replace("count: 1\n", 'count: 1\n    imsi_start: "001010000000002"\n'),
     "ue_groups[1].imsi_start", "duplicate IMSIs"),
    ("dnn with no slice", GOOD.replace("count: 1\n", "count: 1\n    dnn: ims\n"),
     "ue_groups[1].dnn", "has no slice"),
    ("mnc unquoted", GOOD.replace('mnc: "01"', "mnc: 01"), "core.mnc", "quoted"),
]


@pytest.mark.parametrize(("text", "field", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_names_the_field_and_writes_nothing(tmp_path, capsys, text, field, words):
    f = _file(tmp_path, text)
    assert main(["slice", "apply", f]) == 2
    err = capsys.readouterr().err
    assert field in err and words in err and f"{f}:" in err
    assert _stored(tmp_path) == 0
    assert main(["render", "open5gs", "-o", str(tmp_path / "out"), "-t", f]) == 2
    assert not (tmp_path / "out").exists()


def test_unreachable_mongodb_is_one_line_and_nonzero(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(backend, "CONNECT_TIMEOUT_MS", 300)
    uri = f"mongodb://127.0.0.1:{_closed_port()}/open5gs"
    assert main(["slice", "apply", _file(tmp_path, GOOD), "--mongo-uri", uri]) == 3
    err = capsys.readouterr().err
    assert "unreachable" in err and err.count("error:") == 1


def test_render_commands_write_the_files(tmp_path, capsys):
    f = _file(tmp_path, GOOD)
    assert main(["render", "open5gs", "-o", str(tmp_path / "o"), "-t", f]) == 0
    assert (tmp_path / "o" / "smf-be.yaml").exists() and (tmp_path / "o" / "compose.yaml").exists()
    assert main(["render", "ueransim", "-o", str(tmp_path / "u"), "-t", f]) == 0
    assert sorted(p.name for p in (tmp_path / "u").iterdir()) == ["gnb.yaml", "ue-ai.yaml", "ue-be.yaml"]
    out = capsys.readouterr().out
    assert "Open5GS v2.7.x" in out and "UERANSIM v3.3.0" in out


def test_every_command_has_help_with_an_example(capsys):
    for cmd in (["slice", "apply"], ["slice", "list"], ["slice", "diff"], ["subscriber", "show"],
                ["subscriber", "list"], ["subscriber", "delete"], ["render", "open5gs"],
                ["render", "ueransim"], ["ue", "up"], ["ue", "list"]):
        assert main([*cmd, "--help"]) == 0
        assert "Example: testbed" in capsys.readouterr().out
