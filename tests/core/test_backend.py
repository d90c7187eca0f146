"""Where the store lives: URI (unreachable fails fast), embedded, local mongod."""

from __future__ import annotations

import shutil
import socket
import time

import pytest

from testbed.core import backend
from testbed.core.backend import StoreUnreachable, connect, open_store, redact
from testbed.core.provision import desired_ues
from testbed.errors import StateError
from tests.core.core_specs import THREE_SLICES, spec_from


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_mongodb_fails_fast_with_a_clear_message():
    uri = f"mongodb://admin:s3cret@127.0.0.1:{_closed_port()}/open5gs"
    t0 = time.monotonic()
    with pytest.raises(StoreUnreachable) as err:
        connect(uri, timeout_ms=500)
    assert time.monotonic() - t0 < 5
    message = str(err.value)
    assert "unreachable" in message and "0.5 s" in message and "s3cret" not in message


def test_invalid_uri_is_named():
    with pytest.raises(StateError, match="invalid"):
        connect("http://nope", timeout_ms=200)


def test_redact_hides_only_the_password():
    assert redact("mongodb://u:p@h:27017/db") == "mongodb://u:***@h:27017/db"
    assert redact("mongodb://h/db") == "mongodb://h/db"


def test_embedded_store_persists_between_opens(tmp_path, monkeypatch):
    monkeypatch.setattr(backend.shutil, "which", lambda name: None)  # as if no mongod
    spec = spec_from(THREE_SLICES)
    with open_store(spec, state=tmp_path) as opened:
        assert opened.kind == "embedded" and str(tmp_path) in opened.where
        opened.store.apply(desired_ues(spec))
    with open_store(spec, state=tmp_path) as opened:
        assert opened.store.apply(desired_ues(spec)).summary() == "0 created, 0 updated, 6 unchanged"


def test_lab_profile_without_uri_is_an_error(tmp_path):
    spec = spec_from(THREE_SLICES + "profile: lab\n")
    with pytest.raises(StateError, match="mongo_uri"), open_store(spec, state=tmp_path):
        pass


def test_uri_in_the_testbed_file_is_used(tmp_path, monkeypatch):
    spec = spec_from(THREE_SLICES.replace("key_seed: unit-test",
                                          f"key_seed: unit-test, mongo_uri: 'mongodb://127.0.0.1:"
                                          f"{_closed_port()}/open5gs'"))
    monkeypatch.setattr(backend, "CONNECT_TIMEOUT_MS", 300)
    with pytest.raises(StoreUnreachable, match=r"0\.3 s"), open_store(spec, state=tmp_path):
        pass


@pytest.mark.skipif(shutil.which("mongod") is None, reason="no mongod on PATH")
def test_local_mongod_starts_once_and_stops(tmp_path):
    spec = spec_from(THREE_SLICES)
    with open_store(spec, state=tmp_path) as opened:
        assert opened.kind == "mongod"
        opened.store.apply(desired_ues(spec))
    record = backend.read_mongod(tmp_path)
    assert record is not None
    with open_store(spec, state=tmp_path) as opened:
        assert f"pid {record.pid}" in opened.where and len(opened.store.imsis()) == 6
    assert backend.stop_mongod(tmp_path) is True
    assert backend.read_mongod(tmp_path) is None and not (tmp_path / "mongod-data").exists()
    assert backend.stop_mongod(tmp_path) is False


def test_stop_without_a_record_is_a_no_op(tmp_path):
    assert backend.stop_mongod(tmp_path) is False
