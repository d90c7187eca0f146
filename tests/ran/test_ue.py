"""`ue up` and `ue list`: nr-ue launch and wait (with a stand-in nr-ue), the local namespace."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

from testbed.config import parse_yaml
from testbed.config import testbed_from_yaml as spec_of_yaml
from testbed.errors import MissingRequirement, StateError
from testbed.ran import ue as ue_mod
from testbed.ran.ue import ue_down, ue_status, ue_up

SPEC = """
name: u
profile: {profile}
slices:
  - {{name: ai, sst: 1, sd: "000001", subnet: 10.45.0.0/24}}
ue_groups:
  - {{name: ai, slice: ai, count: 3}}
core: {{mongo_uri: "mongodb://127.0.0.1:1/open5gs"}}
"""


def _spec(profile: str):
    return spec_of_yaml(parse_yaml(SPEC.format(profile=profile), "u.yaml"))


def _fake_nr_ue(tmp_path, monkeypatch, make: int | None = None, exit_code: int | None = None):
    """A stand-in for nr-ue: records its argv, 'creates' uesimtunN by touching files, then waits."""
    script = tmp_path / "fake-nr-ue"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, sys, time
        args = sys.argv[1:]
        n = int(args[args.index("-n") + 1])
        d = os.environ["FAKE_IFDIR"]
        open(os.path.join(d, "argv"), "w").write(" ".join(args))
        existing = len([f for f in os.listdir(d) if f.startswith("uesimtun")])
        for i in range({make!r} if {make!r} is not None else n):
            open(os.path.join(d, f"uesimtun{{existing + i}}"), "w").close()
        if {exit_code!r} is not None:
            sys.exit({exit_code!r})
        time.sleep(60)
    """))
    script.chmod(0o755)
    ifdir = tmp_path / "ifs"
    ifdir.mkdir()
    (ifdir / "uesimtun0").touch()  # one from before: must not count
    monkeypatch.setenv("FAKE_IFDIR", str(ifdir))
    return str(script), (lambda: set(os.listdir(ifdir)))


def test_lab_ue_up_waits_for_one_tun_per_ue(tmp_path, monkeypatch):
    binary, lister = _fake_nr_ue(tmp_path, monkeypatch)
    result = ue_up(_spec("lab"), "ai", tmp_path / "state", timeout_s=10, interfaces=lister, nr_ue=binary)
    try:
        assert result.interfaces == ["uesimtun1", "uesimtun2", "uesimtun3"]
        argv = (tmp_path / "ifs" / "argv").read_text().split()
        assert argv[argv.index("-n") + 1] == "3" and argv[argv.index("-i") + 1] == "001010000000001"
        assert (tmp_path / "state" / "ueransim" / "ue-ai.yaml").exists()
        rows = ue_status(_spec("lab"), None, tmp_path / "state")
        assert [r.state for r in rows] == ["running"] * 3
    finally:
        assert ue_down(tmp_path / "state", "ai") == 1
    assert ue_down(tmp_path / "state", "ai") == 0


def test_lab_ue_up_times_out_and_stops_nr_ue(tmp_path, monkeypatch):
    binary, lister = _fake_nr_ue(tmp_path, monkeypatch, make=1)
    with pytest.raises(StateError, match=r"only 1 of 3 uesimtun .* within 0\.6 s"):
        ue_up(_spec("lab"), "ai", tmp_path / "state", timeout_s=0.6, interfaces=lister, nr_ue=binary)
    assert not (tmp_path / "state" / "nr-ue-ai.json").exists()
    assert [r.state for r in ue_status(_spec("lab"), None, tmp_path / "state")] == ["stopped"] * 3


def test_lab_ue_up_reports_an_early_exit(tmp_path, monkeypatch):
    binary, lister = _fake_nr_ue(tmp_path, monkeypatch, make=0, exit_code=1)
    with pytest.raises(StateError, match="exited with 1"):
        ue_up(_spec("lab"), "ai", tmp_path / "state", timeout_s=10, interfaces=lister, nr_ue=binary)


def test_lab_without_nr_ue_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(ue_mod.shutil, "which", lambda name: None)
    with pytest.raises(MissingRequirement, match="nr-ue"):
        ue_up(_spec("lab"), "ai", tmp_path / "state")


def test_unknown_group_is_named(tmp_path):
    with pytest.raises(StateError, match="no UE group 'zz'"):
        ue_up(_spec("local"), "zz", tmp_path)


def test_local_ue_up_is_the_group_namespace(tmp_path, monkeypatch):
    monkeypatch.setattr(ue_mod, "NETNS_DIR", tmp_path / "netns")
    with pytest.raises(StateError, match="tb-u-ue-ai does not exist"):
        ue_up(_spec("local"), "ai", tmp_path)
    (tmp_path / "netns").mkdir()
    (tmp_path / "netns" / "tb-u-ue-ai").touch()
    result = ue_up(_spec("local"), "ai", tmp_path)
    assert result.namespace == "tb-u-ue-ai"
    assert [str(a) for a in result.addresses] == ["10.45.0.2", "10.45.0.3", "10.45.0.4"]
    assert {r.state for r in ue_status(_spec("local"), None, tmp_path)} == {"up"}
