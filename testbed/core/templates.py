"""Jinja2 rendering of the repository's `open5gs/` and `ueransim/` templates into a directory,
all files or none, each YAML file checked to parse before anything is written."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from testbed.errors import MissingRequirement, StateError
from testbed.paths import REPO_ROOT


def template_dir(name: str) -> Path:
    """`open5gs/` or `ueransim/` at the top of the repository (they are not inside the package)."""
    path = REPO_ROOT / name
    if not path.is_dir():
        raise MissingRequirement(f"template directory {path} is missing: run from a source checkout")
    return path


def environment(name: str) -> Environment:
    return Environment(loader=FileSystemLoader(template_dir(name)), undefined=StrictUndefined,
                       trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                       autoescape=False)


def render(env: Environment, template: str, **context: Any) -> str:
    return env.get_template(template).render(**context)


def write_files(files: dict[str, str], outdir: Path, private: set[str] | None = None,
                executable: set[str] | None = None) -> list[Path]:
    """Check every `.yaml` parses, then write all files into `outdir` (created if needed).

    Files are staged in a sibling temporary directory and moved in one by one only after all
    rendered, so a failed render leaves `outdir` untouched. `private` files get mode 0600."""
    for name, text in files.items():
        if name.endswith(".yaml"):
            try:
                yaml.safe_load(text)
            except yaml.YAMLError as exc:  # a template bug, not user input
                raise StateError(f"rendered {name} is not valid YAML: {exc}") from None
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".render-", dir=outdir.parent))
    written: list[Path] = []
    try:
        for name, text in files.items():
            path = stage / name
            path.write_text(text, encoding="utf-8")
            mode = 0o600 if name in (private or set()) else 0o644
            if name in (executable or set()):
                mode |= 0o100
            os.chmod(path, mode)
        for name in files:
            target = outdir / name
            os.replace(stage / name, target)
            written.append(target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return written
