"""The lab's subscriber step, run on the core host next to its MongoDB by the `subscribers` role
(`up`), by status.yml (`status`) and by reset.yml (`down`):

    python -m testbed.core.labstore apply|count|remove SPEC.json --mongo-uri URI

SPEC.json is the testbed spec `testbed up --profile lab` passes to the playbooks (`testbed_spec`).
The same provisioning code as `testbed slice apply`: `desired_ues` and `SubscriberStore` (pymongo,
all or nothing, idempotent). Each action prints one JSON line; a store that cannot be reached, or a
write that fails, is one line on stderr and exit status 1, which the role turns into the failed
task's message.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testbed.config import TestbedSpec
from testbed.core.backend import connect
from testbed.core.provision import desired_ues
from testbed.core.store import SubscriberStore
from testbed.errors import TestbedError

ACTIONS = ("apply", "count", "remove")


def apply(spec: TestbedSpec, store: SubscriberStore) -> dict[str, Any]:
    """Write every UE of every group (with its slice) as a subscriber; extras stay untouched."""
    plan = store.apply(desired_ues(spec))
    return {"created": len(plan.create), "updated": len(plan.update),
            "unchanged": len(plan.unchanged), "writes": plan.writes,
            "subscribers": len(plan.create) + len(plan.update) + len(plan.unchanged)}


def count(spec: TestbedSpec, store: SubscriberStore) -> dict[str, Any]:
    """How many of the spec's subscribers the store holds, of how many, and its total."""
    wanted = {ue.imsi for ue in desired_ues(spec)}
    held = store.imsis()
    return {"subscribers": len(wanted.intersection(held)), "expected": len(wanted),
            "store_total": len(held)}


def remove(spec: TestbedSpec, store: SubscriberStore) -> dict[str, Any]:
    """Delete the spec's subscribers that the store holds (all or nothing); others stay."""
    wanted = {ue.imsi for ue in desired_ues(spec)}
    present = sorted(wanted.intersection(store.imsis()))
    if present:
        store.delete(present)
    return {"removed": len(present)}


def run(action: str, spec_file: Path, mongo_uri: str) -> dict[str, Any]:
    """Open the store at `mongo_uri` and do `action` for the spec in `spec_file`."""
    try:
        spec = TestbedSpec.model_validate(json.loads(spec_file.read_text()))
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise TestbedError(f"{spec_file}: not a testbed spec: {str(exc).splitlines()[0]}") from None
    collection, client = connect(mongo_uri)
    try:
        return {"apply": apply, "count": count, "remove": remove}[action](
            spec, SubscriberStore(collection))
    finally:
        client.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.core.labstore",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("spec", type=Path, help="the testbed spec as JSON (testbed_spec)")
    parser.add_argument("--mongo-uri", required=True, help="e.g. mongodb://127.0.0.1:27017/open5gs")
    args = parser.parse_args(argv)
    try:
        out = run(args.action, args.spec, args.mongo_uri)
    except TestbedError as exc:
        print(" ".join(str(exc).split()), file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
