"""Where the repository's own folders are, for code that ships with them (a checkout or an
editable install): the root, the playbooks and the agents shipped in models/."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO_ROOT / "models"  # the agents and share-policy actors shipped with the repository
PLAYBOOKS_DIR = REPO_ROOT / "playbooks"
