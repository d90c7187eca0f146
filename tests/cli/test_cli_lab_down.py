"""`testbed down --profile lab` without -i: the inventory of the last `up` (README drift, issue 14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer

from testbed.cli.net import _lab_inventory


def test_down_uses_the_inventory_of_the_last_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    for stamp, name in (("20260101T000000Z", "old.yml"), ("20260102T000000Z", "new.yml")):
        d = tmp_path / "runs" / f"{stamp}-lab-up"
        d.mkdir(parents=True)
        (tmp_path / name).write_text("all: {}\n")
        (d / "lab.json").write_text(json.dumps({"inventory": str(tmp_path / name)}))
    assert _lab_inventory(None, remembered=True) == tmp_path / "new.yml"


def test_without_a_previous_up_it_asks_for_the_inventory(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(typer.BadParameter, match="needs -i INVENTORY"):
        _lab_inventory(None, remembered=True)
