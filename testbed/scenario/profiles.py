"""A scenario's service profiles: the registry's, its `service_profiles:` file over them, and its
own `profiles:` changes over both (what a matrix sweeps as `profiles.SERVICE.FIELD`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles import ServiceProfile, load_profiles
from testbed.profiles.parts import DeploySpec, RequestSpec, RuleThresholds
from testbed.profiles.service import GpuCurve

# the blocks of a profile whose fields a change sets one by one, as a profile file's entry does
BLOCKS: dict[str, type[BaseModel]] = {"rule": RuleThresholds, "request": RequestSpec,
                                      "deploy": DeploySpec, "gpu": GpuCurve}


def profile_file(scn: Any, base_dir: Path | None) -> Path | None:
    """The scenario's `service_profiles:` file, under its folder; None without one.

    scn: the scenario; base_dir: its folder (None: the path as written)."""
    own = getattr(scn, "service_profiles", None)
    return (base_dir / own) if own and base_dir is not None else (Path(own) if own else None)


def scenario_profiles(scn: Any, base_dir: Path | None,
                      read: Mapping[str, ServiceProfile] | None = None) -> dict[str, ServiceProfile]:
    """Every profile a scenario's cell runs with: the registry's, the `service_profiles:` file
    over them (`read`: those, loaded already), and the scenario's `profiles:` changes over both;
    a change that does not fit is a ConfigError at `profiles.SERVICE.FIELD`.

    scn: the scenario (a cell's); base_dir: its folder."""
    profiles = dict(read) if read is not None else load_profiles(profile_file(scn, base_dir))
    return apply_changes(profiles, getattr(scn, "profiles", None) or {})


def apply_changes(profiles: Mapping[str, ServiceProfile], changes: Mapping[str, Mapping[str, Any]]
                  ) -> dict[str, ServiceProfile]:
    """`profiles` with each service's fields in `changes` set (a block's fields one by one: a
    `rule:` change keeps the thresholds it does not name); each changed number loses its source.

    profiles: name -> profile; changes: name -> {field: value}."""
    out = dict(profiles)
    for name, fields in changes.items():
        if name not in out:
            raise ConfigError([ConfigProblem("<scenario>", None, f"profiles.{name}",
                                             f"no service {name!r} (known: {', '.join(out)})")])
        base = out[name]
        update = {}
        for field, value in fields.items():
            current = getattr(base, field, None)
            if field in BLOCKS and isinstance(value, Mapping) and isinstance(current, BaseModel):
                value = {**current.model_dump(), **value}
            update[field] = value
        try:
            out[name] = base.replace(**update)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or next(iter(fields), "")
            raise ConfigError([ConfigProblem("<scenario>", None, f"profiles.{name}.{where}",
                                             err["msg"])]) from None
    return out


def profile_path_problem(segs: list[str], services: list[str]) -> str | None:
    """Why a matrix key `profiles.SERVICE.FIELD[.SUBFIELD]` (its segments after `profiles`) names
    nothing, None when it names a profile field of one of `services`.

    segs: the key's segments after `profiles`; services: the scenario's."""
    if not segs:
        return f"'profiles' needs a service and a field (services: {', '.join(services)})"
    if segs[0] not in services:
        return f"{segs[0]!r} is not a service of this scenario (services: {', '.join(services)})"
    if len(segs) < 2:
        return f"name a field of {segs[0]}'s profile ({', '.join(_fields(ServiceProfile))})"
    model: type[BaseModel] | None = ServiceProfile
    for seg in segs[1:]:
        if model is None:
            return f"{seg!r}: {segs[1]} has no fields"
        if seg not in model.model_fields or seg in ("name", "sources"):
            return f"{seg!r} is no field of {segs[0]}'s profile here ({', '.join(_fields(model))})"
        model = BLOCKS.get(seg) if model is ServiceProfile else None
    return None


def _fields(model: type[BaseModel]) -> list[str]:
    return [f for f in model.model_fields if f not in ("name", "sources")]


def set_change(changes: Mapping[str, Any], segs: list[str], value: Any) -> dict[str, Any]:
    """A copy of a scenario's `profiles:` with the value at `segs` (SERVICE, FIELD, ...) set,
    the dicts on the way made where missing.

    changes: the `profiles:` so far; segs: SERVICE, FIELD, ...; value: what to set there."""
    out = dict(changes)
    if len(segs) == 1:
        out[segs[0]] = value
        return out
    inner = out.get(segs[0])
    out[segs[0]] = set_change(inner if isinstance(inner, Mapping) else {}, segs[1:], value)
    return out
