"""Before the first second of a run: no room for the run directory is one line, nothing written."""

from collections import namedtuple
from pathlib import Path

import pytest

from testbed.errors import MissingRequirement
from testbed.scenario import runner


def test_a_full_disk_is_refused_before_the_run(tmp_path: Path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(runner.shutil, "disk_usage", lambda p: usage(10**9, 10**9, 50 * 2**20))
    with pytest.raises(MissingRequirement, match=r"runs: 50 MB free, a run needs at least 200 MB"):
        runner.require_free_space(tmp_path / "runs")
    assert not (tmp_path / "runs").exists()
    monkeypatch.setattr(runner.shutil, "disk_usage", lambda p: usage(10**9, 0, 10**9))
    runner.require_free_space(tmp_path / "runs" / "deeper")  # a folder to be made: its parent counts
