"""A run's manifest.json read back: checked for the keys a report and a re-run need, and turned
into the scenario and testbed the run ran (`testbed run --from`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.errors import StateError

if TYPE_CHECKING:
    from testbed.scenario.load import LoadedScenario

MANIFEST_KEYS = ("scenario", "testbed", "source", "profile", "created", "host")


def read_manifest(path: Path) -> dict:
    """A run's manifest.json as a dict with the keys a report and a re-run need; anything else
    (missing, empty, not JSON, truncated) is one StateError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StateError(f"{path}: cannot read the manifest ({getattr(exc, 'strerror', None) or exc})"
                         ) from None
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        what = "empty" if not text.strip() else f"not JSON ({exc})"
        raise StateError(f"{path}: not a run manifest: {what}") from None
    if not isinstance(manifest, dict):
        raise StateError(f"{path}: not a run manifest: a JSON object is expected")
    missing = [k for k in MANIFEST_KEYS if k not in manifest]
    if missing:
        raise StateError(f"{path}: not a run manifest: missing {', '.join(missing)}")
    for key in ("scenario", "testbed", "host"):
        if not isinstance(manifest[key], dict):
            raise StateError(f"{path}: not a run manifest: {key} must be an object")
    return manifest


def scenario_from_manifest(path: Path) -> LoadedScenario:
    """The scenario and testbed a run ran, from its manifest at `path` (masked secrets back as
    their defaults), to run again."""
    # pydantic models and the scenario layer: loaded only by the commands that read a manifest
    from testbed.config import TestbedSpec
    from testbed.config.secrets import unredact_scenario, unredact_testbed
    from testbed.config.yamlfile import LocatedYaml, validate
    from testbed.scenario.load import LoadedScenario
    from testbed.scenario.spec import Scenario

    manifest = read_manifest(path)
    # masked secrets come back as defaults: keys derive from the default seed
    doc = LocatedYaml(unredact_scenario(manifest["scenario"]), {}, f"{path}: scenario")
    scn = validate(Scenario, doc)
    testbed_doc = LocatedYaml(unredact_testbed(manifest["testbed"]), {}, f"{path}: testbed")
    testbed = validate(TestbedSpec, testbed_doc)
    base = Path(str(manifest.get("base_dir") or Path(str(manifest["source"])).parent))
    return LoadedScenario(scn, testbed, doc, base)
