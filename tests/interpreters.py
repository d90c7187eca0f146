"""Python interpreters other than the one running the tests, for install checks on older versions."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest


def python310() -> str:
    """A Python 3.10 interpreter on PATH or under pyenv; skips the test when there is none."""
    pyenv = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates = [shutil.which("python3.10"), *sorted(glob.glob(f"{pyenv}/versions/3.10*/bin/python3.10"))]
    for exe in filter(None, candidates):
        probe = subprocess.run([exe, "-c", "import sys, venv; print(sys.version_info[:2])"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == "(3, 10)":
            return exe
    pytest.skip("no Python 3.10 interpreter with venv (python3.10 on PATH or under pyenv)")


JAMMY_PIP = "22.0.2"  # Ubuntu 22.04's python3-pip


def ubuntu_jammy_venv(python: str, venv: Path) -> Path:
    """A venv made with `python -m venv` holding the pip that Ubuntu 22.04's venv gets
    (python3-pip-whl, JAMMY_PIP); returns its interpreter."""
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    exe = venv / "bin" / "python"
    subprocess.run([str(exe), "-m", "pip", "install", "-q", f"pip=={JAMMY_PIP}"], check=True,
                   timeout=300)
    return exe
