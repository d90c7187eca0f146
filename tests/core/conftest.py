"""Stores for the core tests: the embedded store always, a real mongod when one is on PATH."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.config import load_testbed
from testbed.config.testbed_spec import TestbedSpec
from testbed.core.backend import connect, embedded_collection, start_mongod, stop_mongod
from testbed.core.store import SubscriberStore


@pytest.fixture(params=["embedded", "mongod"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SubscriberStore]:
    if request.param == "embedded":
        collection, client = embedded_collection(tmp_path / "embedded")
        try:
            yield SubscriberStore(collection)
        finally:
            client.close()
        return
    if shutil.which("mongod") is None:
        pytest.skip("no mongod on PATH: the real-MongoDB variant needs one")
    record = start_mongod(tmp_path / "state")
    try:
        collection, client = connect(record.uri)
        try:
            yield SubscriberStore(collection)
        finally:
            client.close()
    finally:
        stop_mongod(tmp_path / "state")


@pytest.fixture
def spec() -> TestbedSpec:
    return load_testbed()
