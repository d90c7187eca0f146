"""The paper's traces ship with the package (issue 45): they unpack to the files README.md's
SHA-256 lines name, every default points to them, an explicit folder still wins, and a copy of
the package with no shared folder beside it loads the scenarios that read them."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from testbed.reproduce.model import Options
from testbed.scenario.load import load_scenario
from testbed.traces import ARCHIVE, PACKAGE, packaged_traces, traces_folder

ROOT = Path(__file__).resolve().parents[2]
README = ARCHIVE.with_name("README.md")


def test_the_archive_unpacks_to_the_files_its_readme_names():
    want = dict(re.findall(r"^([0-9a-f]{64})  (\S+)$", README.read_text(), re.M))
    folder = packaged_traces()
    got = {hashlib.sha256(p.read_bytes()).hexdigest(): p.relative_to(folder).as_posix()
           for p in sorted(folder.rglob("*.txt"))}
    assert len(want) == 9 and got == want


def test_unpacked_once_into_a_cache_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = packaged_traces()
    assert first.parent == tmp_path / "testbed" and (first / "val" / "day6.txt").is_file()
    (first / "marker").write_text("kept")
    assert packaged_traces() == first and (first / "marker").is_file()  # not unpacked again
    assert [p.name for p in (tmp_path / "testbed").iterdir()] == [first.name]  # no staging left


def test_every_default_is_the_packaged_traces_and_a_path_overrides(tmp_path):
    assert traces_folder(None) == packaged_traces() == traces_folder(PACKAGE)
    assert traces_folder(tmp_path) == tmp_path
    assert Options().traces_dir == packaged_traces()
    for name in ("slo-testbed-ci.yaml", "policies-ci.yaml", "sim-tables.yaml", "slo-testbed.yaml",
                 "pipeline-sim.yaml"):
        assert load_scenario(ROOT / "scenarios" / name).scenario.traces_dir == PACKAGE, name


def test_a_copy_without_a_shared_folder_beside_it_loads_the_trace_scenarios(tmp_path):
    clone = tmp_path / "clone"
    for part in ("testbed", "scenarios", "models"):
        shutil.copytree(ROOT / part, clone / part, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    assert not (tmp_path / "shared").exists()
    probe = ("from pathlib import Path\n"
             "from testbed.scenario.load import load_scenario\n"
             "from testbed.reproduce.artefacts import preflight, select\n"
             "from testbed.reproduce.model import Options\n"
             "for n in ('slo-testbed-ci', 'policies-ci', 'sim-tables', 'pipeline-sim'):\n"
             "    load_scenario(Path('scenarios') / (n + '.yaml'))\n"
             "o = Options()\n"
             "preflight(select(['table5.1', 'table5.2', 'table5.3']), traces_dir=o.traces_dir,\n"
             "          models_dir=Path('models'), rule_only=False)\n"
             "print(o.traces_dir)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "TESTBED_TRACES")}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(clone))
    done = subprocess.run([sys.executable, "-c", probe], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(tmp_path / "home" / ".cache" / "testbed" / "traces-"))
