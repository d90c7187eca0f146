"""A pytest plugin that appends, per test, the CPU seconds of its process and of the children it
waited for (getrusage) and its wall time to a file in $TESTBED_SUITE_CPU_DIR (bench/suite_cpu.py
loads it in every worker with `-p suite_cpu_recorder`; its own folder on PYTHONPATH, so that no
other module of bench/ shadows a user's package, such as the examples' `policies`)."""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

OUT_ENV = "TESTBED_SUITE_CPU_DIR"


def _cpu_s() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    out = os.environ.get(OUT_ENV)
    own0, kids0 = _cpu_s()
    t0 = time.monotonic()
    yield
    if not out:
        return
    own1, kids1 = _cpu_s()
    row = {"id": item.nodeid, "own_s": own1 - own0, "children_s": kids1 - kids0,
           "wall_s": time.monotonic() - t0, "worker": os.environ.get("PYTEST_XDIST_WORKER", "-")}
    with open(Path(out) / f"rows-{os.getpid()}.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
