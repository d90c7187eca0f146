"""Subscriber secrets stay out of what users share: a real run directory and the state file of
a real bring-up are searched for every UE's K and OPc and for the key seed."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.config import load_testbed
from testbed.core.provision import desired_ues
from testbed.pytest_plugin import BESIDE_GROUP
from tests.conftest import namespaces_with_prefix

pytestmark = pytest.mark.needs_root


def _testbed_file(tmp_path: Path, name: str) -> tuple[Path, str]:
    """Group `ai` gives its keys, group `be` derives them from a seed unique to this test."""
    seed = "seed-" + secrets.token_hex(8)
    k, opc = secrets.token_hex(16).upper(), secrets.token_hex(16)
    path = tmp_path / "tb.yaml"
    path.write_text(f"""\
name: {name}
slices:
  - {{name: ai, sst: 1, sd: "000001", subnet: 10.45.0.0/24, guaranteed_mbit: 20}}
  - {{name: be, sst: 1, sd: "000002", subnet: 10.46.0.0/24}}
ue_groups:
  - {{name: ai, slice: ai, count: 2, k: "{k}", opc: "{opc}"}}
  - {{name: be, slice: be, count: 2}}
core:
  key_seed: {seed}
""")
    return path, seed


def _secrets_of(path: Path, seed: str) -> set[str]:
    keys = set()
    for ue in desired_ues(load_testbed(path)):
        keys |= {ue.subscriber.security.k.lower(), ue.subscriber.security.opc.lower()}
    assert len(keys) == 4  # two groups, one K/OPc pair each
    return keys | {seed.lower()}


def _hits(root: Path, needles: set[str]) -> list[str]:
    found = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            text = p.read_bytes().lower()
            found += [f"{p.relative_to(root)}: {n}" for n in needles if n.encode() in text]
    return found


@pytest.mark.slow  # a whole scenario run
@pytest.mark.xdist_group(BESIDE_GROUP)  # one such testbed at a time
def test_a_finished_run_directory_holds_no_key_and_no_seed(tmp_path, state_dir):
    tb_file, seed = _testbed_file(tmp_path, "sec")
    needles = _secrets_of(tb_file, seed)
    scn = tmp_path / "secrets.yaml"
    scn.write_text("name: secrets\nduration_s: 6\ntestbed: tb.yaml\nservices:\n"
                   "  - {name: imgcls, replicas: 1}\nclients:\n"
                   "  - {service: imgcls, ue_group: ai, rate: 2}\n"
                   "expect:\n  - requests[service=imgcls] > 0\n")
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(scn), "--out", str(out),
                           "--no-progress"], capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, COLUMNS="200"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = next(out.iterdir())
    assert (run / "report.html").exists()
    assert not list(run.rglob("*.collection")), "the subscriber store is in the run directory"
    assert _hits(run, needles) == []
    assert not any(n in proc.stdout + proc.stderr for n in needles)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["testbed"]["core"]["key_seed"] == "<redacted>"
    assert manifest["testbed"]["ue_groups"][0]["k"] == "<redacted>"
    # the cell's store lived beside the state files and went with the cell's testbed
    assert list(state_dir.iterdir()) == []
    name = json.loads(next(run.glob("cells/*/rep-0/cell.json")).read_text())["testbed"]["name"]
    assert namespaces_with_prefix(f"tb-{name}-") == []


def test_the_state_file_of_a_bring_up_holds_no_key_and_the_store_is_private(tmp_path, state_dir,
                                                                             tb_name):
    tb_file, seed = _testbed_file(tmp_path, tb_name)
    needles = _secrets_of(tb_file, seed)
    testbed = [sys.executable, "-m", "testbed"]
    up = subprocess.run([*testbed, "up", "-c", str(tb_file)], capture_output=True, text=True,
                        timeout=120)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state_file = state_dir / f"{tb_name}.json"
        assert state_file.stat().st_mode & 0o777 == 0o600
        assert _hits(state_dir, needles) != []  # the store holds them, so the search works
        assert [h for h in _hits(state_dir, needles) if not h.startswith(f"{tb_name}/")] == []
        state = json.loads(state_file.read_text())
        assert state["spec"]["core"]["key_seed"] == "<redacted>"
        store = next(state_dir.glob(f"{tb_name}/*-*"))  # embedded-store/ or mongod-data/
        modes = {p.relative_to(store).as_posix(): p.stat().st_mode & 0o777
                 for p in [store, *store.rglob("*")]}
        assert len(modes) > 1
        assert all(m == (0o700 if (store / p).is_dir() else 0o600) for p, m in modes.items()), modes
        st = subprocess.run([*testbed, "status", "--name", tb_name, "--json"], capture_output=True,
                            text=True, timeout=60)
        assert st.returncode == 0 and not any(n in st.stdout for n in needles), st.stderr
    finally:
        down = subprocess.run([*testbed, "down", "--name", tb_name], capture_output=True,
                              text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert namespaces_with_prefix(f"tb-{tb_name}-") == []
