"""`matrix:` expansion: every combination of parameter values becomes a cell of the run.

Keys are aliases for common knobs (`slicing`, `iperf_flows`, `policy`, `ratio`, `rate`,
`replicas`, `capacity_mbit`, and top-level numbers such as `time_scale`) or explicit paths
such as `services[1].policy` or `testbed.link.delay_ms`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from testbed.config import TestbedSpec
from testbed.profiles.paper import PAPER_TABLES
from testbed.scenario.spec import Scenario

TOP_LEVEL = ("time_scale", "duration_s", "total_units", "seed", "scaler_period_s")
MAX_CELLS = 1000  # cells of one run (each brings up a testbed): more is a typo, not a plan


@dataclass(frozen=True)
class Cell:
    """One combination of matrix values, with the scenario and testbed it resolves to."""

    index: int
    params: dict[str, Any]
    scenario: Scenario
    testbed: TestbedSpec

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={fmt_value(v)}" for k, v in self.params.items()) or "base"

    @property
    def slug(self) -> str:
        s = "_".join(f"{k}-{fmt_value(v)}" for k, v in self.params.items()) or "base"
        return f"{self.index:02d}-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", s)


def fmt_value(v: Any) -> str:
    if v is True:
        return "on"
    if v is False:
        return "off"
    return str(v)


def _update_list(items: list, field: str, value: Any) -> list:
    return [i.model_copy(update={field: value}) for i in items]


def _alias(key: str, scn: Scenario) -> Callable[[Scenario, TestbedSpec, Any],
                                                tuple[Scenario, TestbedSpec]] | None:
    """The setter a matrix key stands for, or None when no field of this scenario uses it."""
    if key == "slicing":
        return lambda s, t, v: (s, t.model_copy(update={"link": t.link.model_copy(
            update={"slicing": v})}))
    if key == "capacity_mbit":
        return lambda s, t, v: (s, t.model_copy(update={"link": t.link.model_copy(
            update={"capacity_mbit": v})}))
    if key == "iperf_flows" and scn.cross_traffic:
        return lambda s, t, v: (s.model_copy(update={"cross_traffic": _update_list(
            s.cross_traffic, "flows", v)}), t)
    if key in ("ratio", "rate") and any(getattr(c, key) is not None for c in scn.clients):
        def set_clients(s: Scenario, t: TestbedSpec, v: Any) -> tuple[Scenario, TestbedSpec]:
            clients = [c.model_copy(update={key: v}) if getattr(c, key) is not None else c
                       for c in s.clients]
            return s.model_copy(update={"clients": clients}), t
        return set_clients
    if key in ("policy", "replicas"):
        return lambda s, t, v: (s.model_copy(update={"services": _update_list(
            s.services, key, v)}), t)
    if key == "service":
        # one service at a time (Section 5.3 tests each service independently)
        def keep_one(s: Scenario, t: TestbedSpec, v: Any) -> tuple[Scenario, TestbedSpec]:
            if v not in {x.name for x in s.services}:
                raise ValueError(f"no service {v!r} in `services:`")
            return s.model_copy(update={
                "services": [x for x in s.services if x.name == v],
                "clients": [c for c in s.clients if c.service == v]}), t
        return keep_one
    if key == "paper_table":
        def set_paper(s: Scenario, t: TestbedSpec, v: Any) -> tuple[Scenario, TestbedSpec]:
            table = PAPER_TABLES.get(str(v))
            if table is None:
                raise ValueError(f"no paper table {v!r} (tables: {', '.join(PAPER_TABLES)})")
            clients = [c.model_copy(update={"ratio": table.ratios[c.service]})
                       if c.service in table.ratios else c for c in s.clients]
            return s.model_copy(update={"clients": clients, "total_units": table.total_units}), t
        return set_paper
    if key in TOP_LEVEL:
        return lambda s, t, v: (s.model_copy(update={key: v}), t)
    m = re.fullmatch(r"(services|clients|cross_traffic)\[(\d+)\]\.(\w+)", key)
    if m:
        listname, idx, field = m[1], int(m[2]), m[3]
        items = getattr(scn, listname)
        if idx >= len(items) or field not in type(items[idx]).model_fields:
            return None

        def set_item(s: Scenario, t: TestbedSpec, v: Any) -> tuple[Scenario, TestbedSpec]:
            lst = list(getattr(s, listname))
            lst[idx] = lst[idx].model_copy(update={field: v})
            return s.model_copy(update={listname: lst}), t
        return set_item
    m = re.fullmatch(r"testbed\.link\.(\w+)", key)
    if m and m[1] in TestbedSpec.model_fields["link"].annotation.model_fields:
        return lambda s, t, v: (s, t.model_copy(update={"link": t.link.model_copy(
            update={m[1]: v})}))
    return None


def check_matrix(scn: Scenario, testbed: TestbedSpec) -> list[tuple[tuple, str]]:
    """Every key must set a field, and every value must be valid for it."""
    problems: list[tuple[tuple, str]] = []
    cells = 1
    for values in scn.matrix.values():
        cells *= max(1, len(values))
        if cells > MAX_CELLS:
            sizes = " x ".join(str(len(v)) for v in scn.matrix.values())
            return [(("matrix",), f"{sizes} values make more than {MAX_CELLS} cells; split the "
                     "scenario or drop values")]
    for key, values in scn.matrix.items():
        setter = _alias(key, scn)
        if setter is None:
            problems.append((("matrix", key), f"matrix key {key!r} matches no field of this "
                             "scenario (try slicing, iperf_flows, policy, ratio, rate, replicas, "
                             "capacity_mbit, time_scale, services[i].field, ...)"))
            continue
        if not values:
            problems.append((("matrix", key), "needs at least one value"))
        for i, value in enumerate(values):
            try:
                s, t = setter(scn, testbed, value)
                Scenario.model_validate(s.model_dump(warnings=False))
                TestbedSpec.model_validate(t.model_dump(warnings=False))
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"])
                problems.append((("matrix", key, i), f"value {value!r} does not fit: "
                                 f"{where}: {err['msg']}"))
            except (ValueError, TypeError) as exc:
                detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                problems.append((("matrix", key, i), f"value {value!r} does not fit: {detail}"))
    return problems


def expand(scn: Scenario, testbed: TestbedSpec) -> list[Cell]:
    """All cells, in the order the matrix lists its keys and values."""
    keys = list(scn.matrix)
    cells = []
    for i, combo in enumerate(itertools.product(*(scn.matrix[k] for k in keys))):
        s, t = scn, testbed
        for key, value in zip(keys, combo, strict=True):
            setter = _alias(key, scn)
            assert setter is not None  # checked at load time
            s, t = setter(s, t, value)
        # re-validate so a matrix value of the wrong type is caught before anything starts
        s = Scenario.model_validate(s.model_dump(warnings=False))
        t = TestbedSpec.model_validate(t.model_dump(warnings=False))
        cells.append(Cell(i, dict(zip(keys, combo, strict=True)), s, t))
    return cells
