"""The service registry: every service the harness knows, by name, and where each came from.

The paper's three services are the packaged profile file's entries (`services.yaml` beside this
module), read the way a user's file is. A user adds services from a profile file (a scenario's
`service_profiles:`, `--profiles FILE`), from an installed package (the `testbed.services` entry-point
group: a profile file's path, a ServiceProfile, or a mapping of them), or from Python
(`register_service`). A file may also change single fields of a known service.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from testbed import plugins
from testbed.config.yamlfile import LocatedYaml, load_yaml_file, parse_yaml, validate
from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles import paper
from testbed.profiles.parts import RuleThresholds
from testbed.profiles.service import ProfileSet, ServiceProfile

PACKAGED_PROFILES = "testbed/profiles/services.yaml"  # as the docs and errors name it
ENTRY_POINT_GROUP = "testbed.services"
_MERGED = ("rule", "request", "deploy")  # a file's partial block of a known service merges into it
_registered: dict[str, tuple[ServiceProfile, str]] = {}  # name -> (profile, where it came from)


def default_profiles() -> dict[str, ServiceProfile]:
    """Every registered service: the packaged profiles (Table 4.4 of the dissertation; each number
    names its source), those of installed packages and those added with `register_service`.
    A new dict each call; the profiles in it are frozen and shared."""
    out = dict(_packaged_profiles())
    out.update(_installed_profiles())
    out.update({name: p for name, (p, _) in _registered.items()})
    return out


def services() -> dict[str, ServiceProfile]:
    """The registry: every known service's profile by name (as `default_profiles`)."""
    return default_profiles()


@functools.cache
def _packaged_profiles() -> dict[str, ServiceProfile]:
    # parsed once per process: every evaluation and state builder asks for them (~40 ms a parse)
    text = resources.files("testbed.profiles").joinpath("services.yaml").read_text(encoding="utf-8")
    packaged = validate(ProfileSet, parse_yaml(text, PACKAGED_PROFILES)).services
    return {name: _with_paper_rule(p) for name, p in packaged.items()}


def _with_paper_rule(profile: ServiceProfile) -> ServiceProfile:
    """The dissertation's tuned thresholds (Tables 4.9/4.10, kept in `paper`) for a service it tuned."""
    v1 = paper.RULE_V1_THRESHOLDS.get(profile.name)
    v2 = paper.RULE_V2_THRESHOLDS.get(profile.name)
    if v1 is None and v2 is None:
        return profile
    rule = RuleThresholds(**(v1 or {}), **(v2 or {}))
    return profile.model_copy(update={"rule": rule})


@functools.cache
def _installed_profiles() -> dict[str, ServiceProfile]:
    out: dict[str, ServiceProfile] = {}
    origin: dict[str, str] = {}
    packaged = _packaged_profiles()
    for ep_name, obj in plugins.entry_points(ENTRY_POINT_GROUP):
        where = f"entry point {ENTRY_POINT_GROUP}:{ep_name}"
        for name, profile in _profiles_of(obj, where).items():
            clash = origin.get(name) or (PACKAGED_PROFILES if name in packaged else None)
            if clash:
                raise ConfigError([ConfigProblem(where, None, name,
                                                 f"a service named {name!r} is already defined by {clash}")])
            out[name], origin[name] = profile, where
    return out


def _profiles_of(obj: Any, where: str) -> dict[str, ServiceProfile]:
    """The profiles an entry point or `register_service` gives: a path, a profile, or a mapping."""
    if isinstance(obj, ServiceProfile):
        if not obj.name:
            raise ConfigError([ConfigProblem(where, None, "name", "a registered profile needs a name")])
        return {obj.name: obj}
    if isinstance(obj, str | Path):
        return _file_services(Path(obj))
    if isinstance(obj, Mapping):
        doc = LocatedYaml({"services": {k: (v.model_dump() if isinstance(v, ServiceProfile) else v)
                                        for k, v in obj.items()}}, {}, where)
        return validate(ProfileSet, doc).services
    raise ConfigError([ConfigProblem(where, None, "", f"expected a profile file's path, a ServiceProfile "
                                                      f"or a mapping of them, got {type(obj).__name__}")])


def register_service(service: ServiceProfile | str | Path | Mapping[str, Any], *,
                     replace: bool = False) -> list[str]:
    """Add services to the registry of this process.

    Args:
        service: a ServiceProfile (with its `name`), a profile file's path (every service in it), or
            a mapping of name to a profile or its fields.
        replace: allow a name that is already registered (otherwise one name is one service).

    Returns:
        The names added.

    Raises:
        ConfigError: a field missing or wrong, or a name already defined (without `replace`).
    """
    where = str(service) if isinstance(service, str | Path) else "register_service()"
    given = _profiles_of(service, where)
    known = {**_packaged_profiles(), **_installed_profiles()}
    for name in given:
        if not replace and (name in _registered or name in known):
            origin = _registered[name][1] if name in _registered else "the packaged or installed profiles"
            message = f"a service named {name!r} is already defined by {origin} (replace=True to change it)"
            raise ConfigError([ConfigProblem(where, None, name, message)])
    for name, profile in given.items():
        _registered[name] = (profile, where)
    return list(given)


def unregister_service(name: str) -> None:
    """Remove a service added with `register_service` (the packaged and installed stay).

    name: the service's name."""
    _registered.pop(name, None)


def _file_services(path: Path) -> dict[str, ServiceProfile]:
    """The services a profile file defines, whole (no merging over known ones)."""
    doc = load_yaml_file(path)
    services = validate(ProfileSet, doc).services
    check_refs(doc, services, path.parent, _named(doc))
    return services


def _named(doc: LocatedYaml) -> dict[str, set[str]]:
    """The fields each service entry of a file names itself."""
    services = doc.data.get("services") if isinstance(doc.data, dict) else None
    if not isinstance(services, dict):
        return {}
    return {name: set(entry) for name, entry in services.items() if isinstance(entry, dict)}


def load_profiles(path: str | Path | None = None) -> dict[str, ServiceProfile]:
    """The registry's profiles with `path`'s merged over them: a file may add services, and change
    only some fields of a known service (the rest, and their sources, stay as they were; a partial
    `rule:`, `request:` or `deploy:` block changes only the fields it names). `module:attr`
    references in the file are imported from its folder (a missing module is an error naming the line).

    Args:
        path: a profile file (the format of `services.yaml`); None gives the registry's profiles.
    """
    profiles = default_profiles()
    if path is None:
        return profiles
    doc = load_yaml_file(path)
    named = _named(doc)
    services = doc.data.get("services") if isinstance(doc.data, dict) else None
    shared = doc.data.get("sources") if isinstance(doc.data, dict) else None
    if isinstance(services, dict):
        for name, entry in services.items():
            if isinstance(entry, dict) and name in profiles:
                services[name] = _over(profiles[name], entry, shared, str(path))
    given = validate(ProfileSet, doc).services
    check_refs(doc, given, Path(path).parent, named)
    profiles.update(given)
    return profiles


def check_refs(doc: LocatedYaml, services: Mapping[str, ServiceProfile], folder: Path,
               named: Mapping[str, set[str]]) -> None:
    """Import every `client:` and `handler:` a file names itself (from `folder` first), so that a
    plugin that fails to import is an error at load, naming the file's line.

    doc: the file's YAML with its lines; services: its profiles; folder: the file's folder; named:
    service -> the fields (`client`, `handler`) the file itself sets."""
    plugins.add_path(folder)
    for name, profile in services.items():
        for field in ("client", "handler"):
            ref = getattr(profile, field)
            if ref and field in named.get(name, ()):
                path = ("services", name, field)
                plugins.load_ref(ref, source=doc.source, line=doc.line_of(path),
                                 field=f"services.{name}.{field}", base_dir=folder)


def _over(base: ServiceProfile, entry: dict[str, Any], shared: Any, source: str) -> dict[str, Any]:
    fields = base.model_dump(exclude={"name", "sources"})
    given = {k for k in entry if k in fields}
    sources = {k: v for k, v in base.sources.items() if k not in given}
    sources.update({k: f"given in {source}" for k in given})
    for stated in (shared, entry.get("sources")):
        if isinstance(stated, dict):
            sources.update(stated)
    merged = {k: {**fields[k], **entry[k]} for k in _MERGED
              if isinstance(entry.get(k), dict) and isinstance(fields.get(k), dict)}
    return {**fields, **entry, **merged, "sources": sources}


def profile_for(
    profiles: dict[str, ServiceProfile], service: str, source: str = "services"
) -> ServiceProfile:
    """`profiles[service]`, or a ConfigError naming the known services.

    profiles: name -> profile; service: the one wanted; source: the file (or "services") the error
    names."""
    try:
        return profiles[service]
    except KeyError:
        known = ", ".join(sorted(profiles))
        raise ConfigError(
            [ConfigProblem(source, None, service, f"unknown service (known: {known})")]
        ) from None


def known_services(profiles: Mapping[str, ServiceProfile], profile_file: str | None = None) -> str:
    """The sentence an unknown-service error ends with: what is known, and how to add one.

    profiles: the services known; profile_file: the user's profile file, when one was given."""
    where = f" and {profile_file}" if profile_file else ""
    return (f"known: {', '.join(sorted(profiles))} (the registry{where}); add a service with a "
            "profile file (`service_profiles:` / --profiles FILE) or the testbed.services entry point")
