"""Objects named by reference (`module:attr`) and installed plugins (entry points): how a user's own
service handler, request builder or scaling policy reaches the harness without a fork.

A reference is imported from the folder of the file that names it (a scenario or a profile file),
from the folders added before, or from PYTHONPATH. The folders added are remembered so that the
processes the harness starts (emulated replicas) import the same modules.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testbed.errors import ConfigError, ConfigProblem

REF_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"  # package.module:attr.sub
PATH_ENV = "TESTBED_PLUGIN_PATH"  # folders a child process adds to sys.path (os.pathsep-separated)
_added: list[str] = []


def is_ref(text: str) -> bool:
    """Whether `text` has the form `module:attr` (rather than a built-in name)."""
    return re.match(REF_PATTERN, text) is not None


def add_path(folder: str | Path) -> None:
    """Make modules in `folder` importable by references, here and in child processes.

    Args:
        folder: a folder holding a user's modules (a scenario's or profile file's folder).
    """
    path = str(Path(folder).resolve())
    if path not in _added:
        _added.append(path)
    if path not in sys.path:
        sys.path.insert(0, path)


def search_path() -> list[str]:
    """The folders added with `add_path`, and those inherited through PATH_ENV, newest first."""
    return list(_added)


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with PATH_ENV set, so that a child process started by the
    harness resolves the same references."""
    out = dict(os.environ if env is None else env)
    if _added:
        out[PATH_ENV] = os.pathsep.join(_added)
    return out


def _inherit() -> None:
    for folder in os.environ.get(PATH_ENV, "").split(os.pathsep):
        if folder:
            add_path(folder)


def load_ref(ref: str, *, source: str = "<reference>", line: int | None = None, field: str = "",
             base_dir: str | Path | None = None) -> Any:
    """The object `module:attr` names.

    Args:
        ref: the reference, e.g. `my_policies:QueuePolicy`.
        source: the file that names it (for the error).
        line: the line that names it (for the error).
        field: the field that names it (for the error).
        base_dir: a folder to import from first (the naming file's folder).

    Raises:
        ConfigError: one line naming file, line and field when the reference is malformed, its
            module fails to import, or the attribute is missing.
    """
    def fail(message: str) -> ConfigError:
        return ConfigError([ConfigProblem(source, line, field, message)])

    if not is_ref(ref):
        raise fail(f"{ref!r} is not a reference of the form module:attr")
    if base_dir is not None:
        add_path(base_dir)
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a plugin's own error, whatever it is, is the user's to see
        detail = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise fail(f"cannot import {module_name!r} for {ref!r} ({detail})") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise fail(f"{module_name!r} has no attribute {attr!r} (from {ref!r})")
        obj = getattr(obj, part)
    return obj


def entry_points(group: str) -> Iterator[tuple[str, Any]]:
    """(name, loaded object) for each installed entry point of `group`.

    Raises:
        ConfigError: naming the distribution and entry point whose object fails to load.
    """
    from importlib.metadata import entry_points as installed

    for ep in installed(group=group):
        try:
            obj = ep.load()
        except Exception as exc:
            dist = ep.dist.name if ep.dist is not None else "an installed package"
            detail = f"{type(exc).__name__}: {exc}".splitlines()[0]
            raise ConfigError([ConfigProblem(
                f"entry point {group}:{ep.name}", None, "",
                f"{ep.value} (from {dist}) failed to load ({detail})")]) from None
        yield ep.name, obj


_inherit()
