"""Which YAML files are scenarios: the scenario globs as regular expressions, matched from the
rootdir, and a look at a file's content (see testbed.pytest_plugin)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

SUFFIXES = (".yaml", ".yml")
# today's rule as globs: the YAML files directly inside any folder named `scenarios`
DEFAULT_GLOBS = ["**/scenarios/*.yaml", "**/scenarios/*.yml"]
_SCENARIO_KEYS = re.compile(r"^(?:duration_s|services)\s*:", re.M)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """The regular expression of the glob `pattern`: `**/` any folders (none too), `**` anything,
    `*` and `?` within one name, `[...]` one of a set (`[!...]` none of it)."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2:]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1:end]
            negate = body.startswith("!")
            body = re.escape(body[1:] if negate else body).replace("\\-", "-")
            out.append(f"[{'^' if negate else ''}{body}]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def matches_glob(path: Path, globs: list[re.Pattern[str]], root: Path) -> bool:
    """Whether `path` matches one of `globs` (from glob_regex): a relative glob is matched
    against the path from `root` (for a path outside `root`, against its absolute path without
    the leading slash, which only a glob starting with `**/` can match), an absolute one
    against the absolute path."""
    full = Path(os.path.abspath(path)).as_posix()
    try:
        rel = Path(os.path.abspath(path)).relative_to(Path(os.path.abspath(root))).as_posix()
    except ValueError:
        rel = full.lstrip("/")
    return any(g.fullmatch(full if g.pattern.startswith("/") else rel) for g in globs)


def looks_like_scenario(path: Path) -> bool:
    """Whether the YAML file at `path` is a scenario rather than another YAML file: a mapping
    with `duration_s` or a list of `services:` (a profile file's `services:` is a mapping).
    A file that does not parse counts when a line starts with `duration_s:` or `services:`,
    so that a scenario with a YAML error is reported rather than left out."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError:
        return _SCENARIO_KEYS.search(text) is not None
    return isinstance(raw, dict) and ("duration_s" in raw or isinstance(raw.get("services"), list))
