"""The example fourth service (examples/asr): its own client and handler run in a real emulated
replica and a real load client, from the example's folder, with no file of the package changed."""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path

import pytest

from testbed.cluster.replica import EmulatedReplica
from testbed.errors import ConfigError
from testbed.load.api import client_for
from testbed.load.client import ClientConfig, LoadClient
from testbed.profiles import load_profiles

ROOT = Path(__file__).resolve().parents[2]
ASR_FILE = ROOT / "examples" / "asr" / "asr.yaml"
PAPER_NAMES = re.compile(r"""["'](chatbot|imgcls|tts)["']""")


@pytest.mark.timed
def test_the_example_service_is_served_and_checked_through_its_own_handler_and_client():
    from aiohttp.test_utils import TestServer

    profile = load_profiles(ASR_FILE)["asr"].replace(startup_ms=0, proc_time_ms=(20, 30))
    records = []

    async def main() -> None:
        replica = EmulatedReplica("asr", profile, seed=1)
        async with TestServer(replica.app(), host="127.0.0.1") as srv:
            cfg = ClientConfig("asr", str(srv.make_url("")).rstrip("/"), profile=profile)
            async with LoadClient(cfg, [records.append]) as client:
                await client.run_closed_loop(workers=1, requests=5)

    asyncio.run(main())
    assert [r.error for r in records] == [None] * 5
    assert all(r.bytes_up > 100_000 for r in records)  # the WAV upload of the example's client
    # the profile's processing time (20-30 ms) was spent on each
    assert min(r.latency_ms for r in records) >= 20


def test_a_client_reference_without_build_is_refused_by_name(tmp_path, monkeypatch):
    (tmp_path / "half.py").write_text("class Client:\n    def check(self, body):\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    profile = load_profiles(ASR_FILE)["asr"].replace(client="half:Client")
    with pytest.raises(ConfigError, match=r"service asr: client: half:Client has no build method"):
        client_for(profile)


def test_no_line_of_the_package_outside_profiles_spells_out_the_papers_services():
    lines = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "testbed").rglob("*.py")
             if "profiles" not in p.relative_to(ROOT / "testbed").parts
             for i, line in enumerate(p.read_text().splitlines(), 1) if PAPER_NAMES.search(line)]
    assert not lines, lines


def _tree_digest() -> str:
    h = hashlib.sha256()
    for p in sorted((ROOT / "testbed").rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(ROOT)).encode() + p.read_bytes())
    return h.hexdigest()


def test_adding_the_example_service_changes_no_file_of_the_package(tmp_path):
    """The whole fourth service is the example's folder: the package neither names it nor changes
    when the service is loaded, evaluated on the simulator and served."""
    before = _tree_digest()
    import testbed

    result = testbed.evaluate("rule_v2", "asr", ROOT / "examples" / "asr" / "asr-day.txt",
                              profiles=ASR_FILE, max_steps=40)
    assert result.instances > 1  # rule v2 scaled the service up under the rising load
    assert _tree_digest() == before
    assert not [p for p in (ROOT / "testbed").rglob("*.py") if re.search(r"\basr\b", p.read_text())]
