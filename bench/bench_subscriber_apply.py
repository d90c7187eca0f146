"""Time `slice apply` on the embedded store: first apply (creates), re-apply (no writes), and an
update of every subscriber. Prints figures; run: python3 bench/bench_subscriber_apply.py [UES]"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from testbed.config import parse_yaml
from testbed.config import testbed_from_yaml as spec_of_yaml
from testbed.core.backend import embedded_collection
from testbed.core.provision import desired_ues
from testbed.core.store import SubscriberStore


def spec_with(ues: int, five_qi: int):
    groups = "".join(f"  - {{name: g{i}, slice: {'a' if i % 2 else 'b'}, count: 1000, five_qi: {five_qi}}}\n"
                     for i in range(ues // 1000))
    text = ("name: bench\nslices:\n"
            '  - {name: a, sst: 1, sd: "000001", subnet: 10.40.0.0/16}\n'
            '  - {name: b, sst: 1, sd: "000002", subnet: 10.50.0.0/16}\n'
            f"ue_groups:\n{groups}")
    return spec_of_yaml(parse_yaml(text, "bench.yaml"))


def main() -> None:
    ues = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    with tempfile.TemporaryDirectory() as tmp:
        collection, client = embedded_collection(Path(tmp))
        store = SubscriberStore(collection)
        for label, spec in (("create", spec_with(ues, 9)), ("re-apply", spec_with(ues, 9)),
                            ("update all", spec_with(ues, 7))):
            desired = desired_ues(spec)
            t0 = time.perf_counter()
            plan = store.apply(desired)
            dt = time.perf_counter() - t0
            print(f"{label:>10}: {plan.summary():<45} {dt:7.2f} s  {len(desired) / dt:8.0f} UEs/s")
        client.close()


if __name__ == "__main__":
    main()
