"""`testbed init` writes the built-in testbed file (and a starter scenario) for a user to edit."""

from pathlib import Path

from testbed.cli import main
from testbed.config import load_testbed
from testbed.scenario.load import load_scenario


def test_init_writes_files_that_load_and_never_overwrites_unasked(tmp_path: Path, capsys):
    assert main(["init", str(tmp_path), "--scenario"]) == 0
    assert load_testbed(tmp_path / "testbed.yaml") == load_testbed()  # the built-in one
    loaded = load_scenario(tmp_path / "scenario.yaml")  # cross-references checked: it runs
    assert loaded.testbed.name == "main" and loaded.scenario.expect
    (tmp_path / "testbed.yaml").write_text("name: mine\n")
    assert main(["init", str(tmp_path)]) != 0
    assert "testbed.yaml already exists (--force overwrites)" in capsys.readouterr().err
    assert (tmp_path / "testbed.yaml").read_text() == "name: mine\n"  # untouched
    assert main(["init", str(tmp_path), "--force"]) == 0
    assert load_testbed(tmp_path / "testbed.yaml") == load_testbed()
