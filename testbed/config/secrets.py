"""Subscriber secrets in a testbed document: masked wherever the document is kept on disk.

`core.key_seed` (every derived K/OPc follows from it) and the K/OPc a UE group gives are masked
in manifests and state files, which users share; the keys themselves live only in the
subscriber store and in rendered UE configs (mode 0600). A masked document loads back with the
defaults: the masked fields are dropped, so keys are derived from the default seed.
"""

from __future__ import annotations

import copy
from typing import Any

REDACTED = "<redacted>"
_GROUP_SECRETS = ("k", "opc")


def redact_testbed(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of a testbed document (`model_dump(mode="json")`, or a scenario's inline
    testbed) with the key seed and every given K/OPc masked."""
    out = copy.deepcopy(doc)
    core = out.get("core")
    if isinstance(core, dict) and core.get("key_seed") is not None:
        core["key_seed"] = REDACTED
    for group in out.get("ue_groups") or []:
        if isinstance(group, dict):
            for key in _GROUP_SECRETS:
                if group.get(key) is not None:
                    group[key] = REDACTED
    return out


def unredact_testbed(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of a masked document that validates: masked fields are dropped (defaults apply)."""
    out = copy.deepcopy(doc)
    core = out.get("core")
    if isinstance(core, dict) and core.get("key_seed") == REDACTED:
        del core["key_seed"]
    for group in out.get("ue_groups") or []:
        if isinstance(group, dict):
            for key in _GROUP_SECRETS:
                if group.get(key) == REDACTED:
                    del group[key]
    return out


def redact_scenario(doc: dict[str, Any]) -> dict[str, Any]:
    """A scenario document with its inline testbed (if any) masked."""
    out = dict(doc)
    if isinstance(out.get("testbed"), dict):
        out["testbed"] = redact_testbed(out["testbed"])
    return out


def unredact_scenario(doc: dict[str, Any]) -> dict[str, Any]:
    out = dict(doc)
    if isinstance(out.get("testbed"), dict):
        out["testbed"] = unredact_testbed(out["testbed"])
    return out
