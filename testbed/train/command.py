"""The training command a model's manifest records, with its paths made rerunnable elsewhere."""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path

from testbed.paths import REPO_ROOT


def rerunnable_command(command: str, root: Path = REPO_ROOT, cwd: Path | None = None) -> str:
    """`command` with every path argument as a user reruns it from the repository root `root`:
    inside it, relative to it (models/ddpg.zip); beside it, relative too (../data/traces, the
    layout the docs assume); anywhere else (a scratch folder of the machine that trained it),
    the option's name in capitals (`--out OUT`), since no other machine has it. A clone directly
    in the temporary directory itself has no "beside": its neighbours are scratch folders.
    Relative paths are taken from `cwd` (default: the current directory)."""
    base = (cwd or Path.cwd()).resolve()
    root = root.resolve()
    words = shlex.split(command)
    out: list[str] = []
    for i, word in enumerate(words):
        option, eq, value = word.partition("=")
        if eq and option.startswith("--"):
            out.append(f"{option}={_path(value, option, base, root)}")
        elif i and words[i - 1].startswith("--") and _looks_like_path(word):
            out.append(_path(word, words[i - 1], base, root))
        else:
            out.append(_path(word, "", base, root) if word.startswith("/") else word)
    return shlex.join(out)


def _looks_like_path(word: str) -> bool:
    return word.startswith("/") or os.sep in word or word.endswith((".zip", ".txt", ".json"))


def _path(value: str, option: str, base: Path, root: Path) -> str:
    if not _looks_like_path(value):
        return value
    path = (base / value).resolve()
    beside = root.parent not in (root.parent.parent, Path(tempfile.gettempdir()).resolve())
    anchors = [(root, "")] + ([(root.parent, "..")] if beside else [])
    for anchor, prefix in anchors:
        if path == anchor or path.is_relative_to(anchor):
            rel = path.relative_to(anchor).as_posix()
            return "/".join(p for p in (prefix, rel) if p and p != ".") or "."
    return option.lstrip("-").replace("-", "_").upper() or "PATH"
