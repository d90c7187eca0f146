"""`matrix:` expansion: every combination of parameter values becomes a cell of the run.

A key is a dotted path into the scenario or an alias for a common knob:

- `testbed.<path>` addresses the resolved testbed (`TestbedSpec`): `testbed.link.capacity_mbit`,
  `testbed.slices.ai.guaranteed_mbit`, `testbed.ue_groups.0.count`;
- `profiles.<service>.<field>` a field of a service's profile (`profiles.xrpose.capacity`,
  `profiles.imgcls.rule.slo_high`), set in the scenario's `profiles:` changes;
- any other path addresses the scenario: `clients.0.rate`, `services.imgcls.replicas`,
  `warmup_s`, `time_scale`;
- a list item is named by its `name` field or by its integer index (`services.1.policy`;
  the bracket form `services[1].policy` is the same path);
- the aliases (`ALIASES`): `slicing`, `capacity_mbit`, `iperf_flows`, `policy`, `replicas`,
  `ratio`, `rate`, `service`, `paper_table` set one field in every item that has it.

A path is walked segment by segment through pydantic models, lists and dicts at load time; one
that names nothing is one problem saying which segment and what exists there. Values are checked
by re-validating the models with the value set, as the run does for every cell. Fields the run
reads once (RUN_WIDE) cannot vary per cell.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from testbed.config import TestbedSpec
from testbed.profiles.paper import PAPER_TABLES
from testbed.scenario.profiles import profile_path_problem, set_change
from testbed.scenario.spec import Scenario

MAX_CELLS = 1000  # cells of one run (each brings up a testbed): more is a typo, not a plan
# scenario fields the run reads once, not per cell
RUN_WIDE = ("name", "description", "engine", "markers", "repetitions", "matrix", "expect", "plan")

Setter = Callable[[Scenario, TestbedSpec, Any], tuple[Scenario, TestbedSpec]]


@dataclass(frozen=True)
class Cell:
    """One combination of matrix values, with the scenario and testbed it resolves to."""

    index: int
    params: dict[str, Any]
    scenario: Scenario
    testbed: TestbedSpec

    @property
    def label(self) -> str:
        """The cell's parameters as people read them (`service=imgcls, slicing=on`), or "base"."""
        return ", ".join(f"{k}={fmt_value(v)}" for k, v in self.params.items()) or "base"

    @property
    def slug(self) -> str:
        """The cell's directory name: its index and parameters, safe in a path."""
        s = "_".join(f"{k}-{fmt_value(v)}" for k, v in self.params.items()) or "base"
        return f"{self.index:02d}-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", s)


def fmt_value(v: Any) -> str:
    """A matrix value `v` as labels show it: on/off for booleans."""
    if v is True:
        return "on"
    if v is False:
        return "off"
    return str(v)


class NoSuchPath(ValueError):
    """A matrix key that names nothing in this scenario; the message says where and what exists."""


# ---- aliases -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alias:
    """A knob that sets a field wherever it appears.

    setter: (scenario, testbed, value) -> both with the value set.
    applies: whether this scenario has anything for it to set (None: always).
    needs: what `applies` looks for, for the message when it finds nothing.
    last: the alias drops items (applied after every other key, whose names it would hide)."""

    setter: Setter
    applies: Callable[[Scenario], bool] | None = None
    needs: str = ""
    last: bool = False


def _update_list(items: list, field: str, value: Any) -> list:
    return [i.model_copy(update={field: value}) for i in items]


def _link(field: str) -> Setter:
    return lambda s, t, v: (s, t.model_copy(update={"link": t.link.model_copy(
        update={field: v})}))


def _every_service(field: str) -> Setter:
    return lambda s, t, v: (s.model_copy(update={"services": _update_list(
        s.services, field, v)}), t)


def _clients_with(field: str) -> Setter:
    def set_clients(s: Scenario, t: TestbedSpec, v: Any) -> tuple[Scenario, TestbedSpec]:
        clients = [c.model_copy(update={field: v}) if getattr(c, field) is not None else c
                   for c in s.clients]
        return s.model_copy(update={"clients": clients}), t
    return set_clients


def _set_flows(s: Scenario, t: TestbedSpec, v: Any) -> tuple[Scenario, TestbedSpec]:
    return s.model_copy(update={"cross_traffic": _update_list(s.cross_traffic, "flows", v)}), t


def _keep_one_service(s: Scenario, t: TestbedSpec, v: Any) -> tuple[Scenario, TestbedSpec]:
    # one service at a time (Section 5.3 tests each service independently)
    if v not in {x.name for x in s.services}:
        raise ValueError(f"no service {v!r} in `services:`")
    return s.model_copy(update={
        "services": [x for x in s.services if x.name == v],
        "clients": [c for c in s.clients if c.service == v]}), t


def _set_paper_table(s: Scenario, t: TestbedSpec, v: Any) -> tuple[Scenario, TestbedSpec]:
    table = PAPER_TABLES.get(str(v))
    if table is None:
        raise ValueError(f"no paper table {v!r} (tables: {', '.join(PAPER_TABLES)})")
    clients = [c.model_copy(update={"ratio": table.ratios[c.service]})
               if c.service in table.ratios else c for c in s.clients]
    return s.model_copy(update={"clients": clients, "total_units": table.total_units}), t


def _clients_have(field: str) -> Callable[[Scenario], bool]:
    return lambda scn: any(getattr(c, field) is not None for c in scn.clients)


ALIASES: dict[str, Alias] = {
    "slicing": Alias(_link("slicing")),
    "capacity_mbit": Alias(_link("capacity_mbit")),
    "iperf_flows": Alias(_set_flows, lambda scn: bool(scn.cross_traffic), "`cross_traffic:`"),
    "ratio": Alias(_clients_with("ratio"), _clients_have("ratio"), "a client with `ratio:`"),
    "rate": Alias(_clients_with("rate"), _clients_have("rate"), "a client with `rate:`"),
    "policy": Alias(_every_service("policy")),
    "replicas": Alias(_every_service("replicas")),
    "service": Alias(_keep_one_service, last=True),
    "paper_table": Alias(_set_paper_table),
}


# ---- dotted paths --------------------------------------------------------------------------


def segments(key: str) -> list[str]:
    """The segments of a matrix key: `services[1].policy` and `services.1.policy` alike."""
    return re.sub(r"\[(\d+)\]", r".\1", key).split(".")


def _item_index(items: list, seg: str) -> int | None:
    """The list item a segment names: by its `name`, else by its integer index."""
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else getattr(item, "name", None)
        if name is not None and str(name) == seg:
            return i
    if seg.isdigit() and int(seg) < len(items):
        return int(seg)
    return None


def _children(node: Any) -> str:
    """What can follow a segment that stopped at `node`, for the message."""
    if isinstance(node, BaseModel):
        return "fields: " + ", ".join(type(node).model_fields)
    if isinstance(node, list):
        if not node:
            return "the list is empty"
        names = [str(n) for n in (i.get("name") if isinstance(i, dict) else getattr(i, "name", None)
                                  for i in node) if n is not None]
        index = f"index 0-{len(node) - 1}" if len(node) > 1 else "index 0"
        return f"items: {', '.join(names)} or {index}" if names else f"items: {index}"
    if isinstance(node, dict):
        return "keys: " + (", ".join(map(str, node)) or "none")
    return f"it holds {node!r}, no fields"


def _child(node: Any, seg: str) -> tuple[bool, Any]:
    """(found, the child of `node` that `seg` names)."""
    if isinstance(node, BaseModel):
        return (True, getattr(node, seg)) if seg in type(node).model_fields else (False, None)
    if isinstance(node, list):
        i = _item_index(node, seg)
        return (False, None) if i is None else (True, node[i])
    if isinstance(node, dict):
        return (seg in node, node.get(seg))
    return False, None


def _walk(root: Any, segs: list[str], where: str) -> None:
    """Raise NoSuchPath unless every segment below `root` (shown as `where`) names something."""
    node = root
    for seg in segs:
        found, child = _child(node, seg)
        if not found:
            raise NoSuchPath(f"{seg!r} names nothing in {where} ({_children(node)})")
        node, where = child, f"{where}.{seg}" if where != "the scenario" else seg


def set_path(node: Any, segs: list[str], value: Any) -> Any:
    """A copy of `node` with the value at `segs` replaced (models, lists and dicts alike);
    NoSuchPath when a segment names nothing."""
    if not segs:
        return value
    seg, rest = segs[0], segs[1:]
    found, child = _child(node, seg)
    if not found:
        raise NoSuchPath(f"{seg!r} names nothing ({_children(node)})")
    new = set_path(child, rest, value)
    if isinstance(node, BaseModel):
        return node.model_copy(update={seg: new})
    if isinstance(node, list):
        out = list(node)
        out[_item_index(node, seg)] = new  # type: ignore[index]  # found above
        return out
    return {**node, seg: new}


def _path_setter(key: str, scn: Scenario, testbed: TestbedSpec) -> Setter:
    """The setter of a dotted path, after checking that it names something."""
    segs = segments(key)
    if "" in segs:
        raise NoSuchPath(f"{key!r} has an empty segment (write a.b.c)")
    if segs[0] == "testbed":
        if len(segs) == 1:
            raise NoSuchPath(f"'testbed' names the whole testbed; name a field under it "
                             f"({_children(testbed)})")
        _walk(testbed, segs[1:], "testbed")
        return lambda s, t, v: (s, set_path(t, segs[1:], v))
    if segs[0] in RUN_WIDE:
        raise NoSuchPath(f"{segs[0]!r} is read once per run and cannot vary per cell")
    if segs[0] == "profiles":  # a profile's field, whether the scenario changes it already or not
        problem = profile_path_problem(segs[1:], [s.name for s in scn.services])
        if problem:
            raise NoSuchPath(problem)
        return lambda s, t, v: (s.model_copy(update={"profiles": set_change(s.profiles, segs[1:], v)}), t)
    if segs[0] not in Scenario.model_fields:
        fields = [f for f in Scenario.model_fields if f not in RUN_WIDE]
        raise NoSuchPath(f"{segs[0]!r} names nothing in the scenario (aliases: "
                         f"{', '.join(ALIASES)}; fields: {', '.join(fields)}; testbed.* for the "
                         "testbed)")
    _walk(scn, segs, "the scenario")
    return lambda s, t, v: (set_path(s, segs, v), t)


def resolve(key: str, scn: Scenario, testbed: TestbedSpec) -> tuple[Setter, bool]:
    """The setter a matrix key stands for and whether it runs after the others (it drops items).

    key: as written under `matrix:`; scn, testbed: the base scenario and its resolved testbed.
    Raises NoSuchPath when the key names nothing here."""
    alias = ALIASES.get(key)
    if alias is not None:
        if alias.applies is not None and not alias.applies(scn):
            raise NoSuchPath(f"the alias {key!r} sets nothing here: it needs {alias.needs}")
        return alias.setter, alias.last
    return _path_setter(key, scn, testbed), False


# ---- checking and expanding ----------------------------------------------------------------


def check_matrix(scn: Scenario, testbed: TestbedSpec) -> list[tuple[tuple, str]]:
    """Every key must set a field, and every value must be valid for it.

    scn: the scenario; testbed: its resolved testbed. Returns (path, message) problems."""
    cells = 1
    for values in scn.matrix.values():
        cells *= max(1, len(values))
        if cells > MAX_CELLS:
            sizes = " x ".join(str(len(v)) for v in scn.matrix.values())
            return [(("matrix",), f"{sizes} values make more than {MAX_CELLS} cells; split the "
                     "scenario or drop values")]
    problems: list[tuple[tuple, str]] = []
    for key, values in scn.matrix.items():
        try:
            setter, _ = resolve(key, scn, testbed)
        except NoSuchPath as exc:
            problems.append((("matrix", key), str(exc)))
            continue
        if not values:
            problems.append((("matrix", key), "needs at least one value"))
        problems += [(("matrix", key, i), msg) for i, value in enumerate(values)
                     if (msg := _value_problem(setter, scn, testbed, value))]
    return problems


def _value_problem(setter: Setter, scn: Scenario, testbed: TestbedSpec, value: Any) -> str | None:
    """Why `value` does not fit the field `setter` sets, or None when it does."""
    try:
        s, t = setter(scn, testbed, value)
        Scenario.model_validate(s.model_dump(warnings=False))
        TestbedSpec.model_validate(t.model_dump(warnings=False))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return f"value {value!r} does not fit: {where}: {err['msg']}"
    except (ValueError, TypeError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"value {value!r} does not fit: {detail}"
    return None


def expand(scn: Scenario, testbed: TestbedSpec) -> list[Cell]:
    """All cells, in the order the matrix lists its keys and values.

    scn: the scenario (its `matrix:` checked by check_matrix); testbed: its resolved testbed.
    Keys are applied in the matrix's order, except those that drop items (`service`), last."""
    keys = list(scn.matrix)
    setters = {k: resolve(k, scn, testbed) for k in keys}  # checked at load time
    order = sorted(keys, key=lambda k: setters[k][1])
    cells = []
    for i, combo in enumerate(itertools.product(*(scn.matrix[k] for k in keys))):
        params = dict(zip(keys, combo, strict=True))
        s, t = scn, testbed
        for key in order:
            s, t = setters[key][0](s, t, params[key])
        # re-validate so a matrix value of the wrong type is caught before anything starts
        s = Scenario.model_validate(s.model_dump(warnings=False))
        t = TestbedSpec.model_validate(t.model_dump(warnings=False))
        cells.append(Cell(i, params, s, t))
    return cells
