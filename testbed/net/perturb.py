"""Re-draw a running testbed's flow-queue hash at intervals, as sfq's `perturb` does.

`python -m testbed.net.perturb NAME SECONDS` runs inside the testbed's UPF namespace, started by
`LocalTestbed.up` when `link.flow_queue_perturb_s` is set. Every SECONDS it replaces each flow
queue set's classifier with one salted anew (`Shaper.salted_filters`), so a connection hashed
behind a bulk flow stays there for at most that long. It stops when the testbed's state file is
gone or `tc` fails (the namespace was removed); `teardown` kills it with the namespace's processes.
"""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
import time

from testbed.errors import StateError
from testbed.net.shaping import Shaper, shapers_for, tc_batch
from testbed.net.state import load_state
from testbed.net.topology import N3, N6


def salted_batch(shapers: list[Shaper], salt: int) -> str:
    """One `tc -batch` script that re-draws every flow queue set of `shapers` with `salt`."""
    return tc_batch([cmd for shaper in shapers for cmd in shaper.salted_filters(salt)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.net.perturb", description=__doc__)
    parser.add_argument("name", help="the testbed, as recorded by `testbed up`")
    parser.add_argument("seconds", type=float, help="how often the hash is re-drawn")
    args = parser.parse_args(argv)
    try:
        spec = load_state(args.name).testbed_spec()
    except StateError as exc:
        print(f"perturb: {exc}", file=sys.stderr)
        return 1
    shapers = shapers_for(spec.link, list(spec.slices), n3=N3, n6=N6)
    while True:
        time.sleep(args.seconds)
        try:
            load_state(args.name)
        except StateError:
            return 0  # the testbed is down
        done = subprocess.run(["tc", "-batch", "-"], input=salted_batch(shapers, secrets.randbits(32)),
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"perturb: tc failed: {done.stderr.strip()}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
