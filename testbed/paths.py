"""Where things are: the repository's own folders, for code that ships with them (a checkout or
an editable install: the root, the playbooks, the agents shipped in models/), and the names of
run directories."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO_ROOT / "models"  # the agents and share-policy actors shipped with the repository
PLAYBOOKS_DIR = REPO_ROOT / "playbooks"
RUNS_DIR = Path("runs")  # where a command writes its run directory without --out (from the cwd)
LOCAL_ADMIN_PORT = 8000  # `testbed services up`: metrics/control here, its services on the next ports


def stamped(label: str, root: Path = RUNS_DIR) -> Path:
    """root/<UTC time>-<label>, the name of a run directory (not created)."""
    return root / f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{label}"


def new_run_dir(root: Path, label: str) -> Path:
    """A new, empty run directory root/<UTC time>-<label>, with -2, -3, ... when that exists."""
    path = base = stamped(label, root)
    n = 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


def git_commit() -> str | None:
    """The commit of the checkout this package runs from, or None outside one."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=5).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "")
