"""A wheel carries what `testbed reproduce` needs: the scenarios it runs, as package data, loaded
from an installed copy with no checkout beside it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ["slicing.yaml", "slicing-ci.yaml", "slo-testbed.yaml", "profiles/fast-startup.yaml"]


@pytest.mark.slow
def test_a_wheel_ships_reproduces_scenarios_and_loads_them_installed(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(ROOT)], check=True, timeout=300)
    [wheel] = (tmp_path / "dist").glob("testbed-*.whl")
    with zipfile.ZipFile(wheel) as z:
        for name in SHIPPED:  # the files themselves, not the repository's links to them
            assert z.read(f"testbed/reproduce/scenarios/{name}") == (ROOT / "scenarios" / name).read_bytes()
        for name in ("traces.tar.xz", "README.md"):  # the paper's traces and their provenance
            assert z.read(f"testbed/traces/{name}") == (ROOT / "testbed" / "traces" / name).read_bytes()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    # --ignore-installed: this machine's editable install has the same version
    subprocess.run([venv / "bin" / "pip", "install", "-q", "--no-deps", "--ignore-installed",
                    str(wheel)], check=True, timeout=300)
    probe = ("import testbed, testbed.reproduce.run as r\n"
             "from testbed.scenario.load import load_scenario\n"
             "assert 'site-packages' in testbed.__file__, testbed.__file__\n"
             "for n in ('slicing.yaml', 'slicing-ci.yaml'):\n"
             "    print(load_scenario(r.SCENARIOS / n).scenario.name)\n"
             "from testbed.traces import packaged_traces\n"
             "assert (packaged_traces() / 'test' / 'day7-shift0h.txt').is_file()\n")
    done = subprocess.run([venv / "bin" / "python", "-c", probe], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["slicing", "slicing-ci"]
