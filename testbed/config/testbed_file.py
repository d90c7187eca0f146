"""A testbed file read: its models validated, then the rules across fields that no single field
can check (slices, UE groups, subscribers, link conditions); the built-in default when none is given."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from testbed.config.fiveqi import FIVE_QI, undefined_message
from testbed.config.testbed_spec import TestbedSpec
from testbed.config.yamlfile import FieldPath, LocatedYaml, load_yaml_file, parse_yaml, validate
from testbed.errors import ConfigError


def check_testbed(spec: TestbedSpec) -> list[tuple[FieldPath, str]]:
    """Cross-field rules that a single field cannot check; returns (path, message) pairs."""
    problems, seen = _check_slices(spec)
    found, group_names = _check_ue_groups(spec, seen)
    problems += found
    problems += _check_subscribers(spec)
    problems += _check_conditions(spec, seen, group_names)
    return problems


def _check_slices(spec: TestbedSpec) -> tuple[list[tuple[FieldPath, str]], dict[str, int]]:
    """Slice names and S-NSSAIs unique, ceilings and guarantees within the link, subnets apart;
    returns the problems and each slice name's index."""
    problems: list[tuple[FieldPath, str]] = []
    seen: dict[str, int] = {}
    snssai: dict[tuple[int, str | None], int] = {}
    for i, s in enumerate(spec.slices):
        if s.name in seen:
            problems.append((("slices", i, "name"), f"duplicate slice name {s.name!r} "
                             f"(also slices[{seen[s.name]}])"))
        seen.setdefault(s.name, i)
        if s.snssai in snssai:
            problems.append((("slices", i, "sd"), f"S-NSSAI sst={s.sst} sd={s.sd} is already "
                             f"used by slices[{snssai[s.snssai]}]"))
        snssai.setdefault(s.snssai, i)
        if s.ceiling_mbit is not None and s.ceiling_mbit < s.guaranteed_mbit:
            problems.append((("slices", i, "ceiling_mbit"),
                             f"ceiling {s.ceiling_mbit} is below the guarantee {s.guaranteed_mbit}"))
        if s.ceiling_mbit is not None and s.ceiling_mbit > spec.link.narrowest_mbit:
            problems.append((("slices", i, "ceiling_mbit"),
                             f"ceiling {s.ceiling_mbit} exceeds link capacity "
                             f"{spec.link.narrowest_mbit:g}"))
        if s.subnet.overlaps(spec.dn_subnet):
            problems.append((("slices", i, "subnet"),
                             f"{s.subnet} overlaps the data-network subnet {spec.dn_subnet}"))
        for j in range(i):
            if s.subnet.overlaps(spec.slices[j].subnet):
                problems.append((("slices", i, "subnet"),
                                 f"{s.subnet} overlaps slices[{j}].subnet {spec.slices[j].subnet}"))
    total = 0.0
    for i, s in enumerate(spec.slices):
        total += s.guaranteed_mbit
        if total > spec.link.narrowest_mbit + 1e-9:
            problems.append((("slices", i, "guaranteed_mbit"),
                             f"guarantees add up to {total:g} Mbit/s, above the link capacity "
                             f"{spec.link.narrowest_mbit:g} Mbit/s"))
            break
    return problems, seen


def _check_ue_groups(spec: TestbedSpec, seen: dict[str, int]
                     ) -> tuple[list[tuple[FieldPath, str]], dict[str, int]]:
    """Each UE group's 5QI defined, name unique, slice one of `seen` with room for its UEs;
    returns the problems and each group name's index."""
    problems: list[tuple[FieldPath, str]] = []
    group_names: dict[str, int] = {}
    ues_per_slice: dict[str, int] = {}
    for i, g in enumerate(spec.ue_groups):
        if g.five_qi not in FIVE_QI:
            problems.append((("ue_groups", i, "five_qi"), undefined_message(g.five_qi)))
        if spec.profile == "local" and g.session_type == "ipv6":
            problems.append((("ue_groups", i, "session_type"), "the local data plane is IPv4 only: "
                             "use ipv4 or ipv4v6 (ipv6 sessions need the lab profile)"))
        if g.name in group_names:
            problems.append((("ue_groups", i, "name"), f"duplicate UE group name {g.name!r}"))
        group_names.setdefault(g.name, i)
        if g.slice not in seen:
            problems.append((("ue_groups", i, "slice"),
                             f"no slice named {g.slice!r} (slices: {', '.join(seen)})"))
            continue
        ues_per_slice[g.slice] = ues_per_slice.get(g.slice, 0) + g.count
        room = spec.slice(g.slice).subnet.num_addresses - 3  # network, gateway, broadcast
        if ues_per_slice[g.slice] > room:
            problems.append((("ue_groups", i, "count"),
                             f"slice {g.slice!r} has room for {room} UEs in "
                             f"{spec.slice(g.slice).subnet}, groups ask for "
                             f"{ues_per_slice[g.slice]}"))
    return problems, group_names


def _check_conditions(spec: TestbedSpec, seen: dict[str, int], group_names: dict[str, int]
                      ) -> list[tuple[FieldPath, str]]:
    """Each link condition's slice (with slicing on) and UE group ones the testbed has."""
    problems: list[tuple[FieldPath, str]] = []
    for i, c in enumerate(spec.link.conditions):
        if c.slice is not None and c.slice not in seen:
            problems.append((("link", "conditions", i, "slice"),
                             f"no slice named {c.slice!r} (slices: {', '.join(seen)})"))
        elif c.slice is not None and not spec.link.slicing:
            problems.append((("link", "conditions", i, "slice"),
                             "slicing is off: every slice shares one class, none of its own to "
                             "change; give the trace to the link or a UE group"))
        if c.ue_group is not None and c.ue_group not in group_names:
            problems.append((("link", "conditions", i, "ue_group"),
                             f"no UE group named {c.ue_group!r} (groups: {', '.join(group_names)})"))
    return problems


def _check_subscribers(spec: TestbedSpec) -> list[tuple[FieldPath, str]]:
    """IMSI ranges inside the PLMN and disjoint, keys given in pairs, DNNs served by a slice."""
    problems: list[tuple[FieldPath, str]] = []
    plmn = spec.core.plmn
    ranges: list[tuple[int, int, int]] = []
    dnns = {s.dnn for s in spec.slices}
    for i, g in enumerate(spec.ue_groups):
        if (g.k is None) != (g.opc is None):
            missing = "opc" if g.opc is None else "k"
            problems.append((("ue_groups", i, missing), "give both k and opc, or neither "
                             "(then both are derived from core.key_seed)"))
        if g.imsi_start is not None and not g.imsi_start.startswith(plmn):
            problems.append((("ue_groups", i, "imsi_start"),
                             f"IMSI {g.imsi_start} is not in PLMN {spec.core.mcc}/{spec.core.mnc} "
                             f"(must start with {plmn})"))
            continue
        start = spec.imsi_start_of(g)
        last = start + g.count - 1
        if not str(last).zfill(15).startswith(plmn) or last >= 10**15:
            problems.append((("ue_groups", i, "count"),
                             f"IMSI range {str(start).zfill(15)}+{g.count} leaves PLMN {plmn}"))
            continue
        for other_start, other_last, other_i in ranges:
            if start <= other_last and other_start <= last:
                problems.append((("ue_groups", i, "imsi_start"),
                                 f"IMSIs {str(start).zfill(15)}..{str(last).zfill(15)} overlap "
                                 f"ue_groups[{other_i}] ({str(other_start).zfill(15)}.."
                                 f"{str(other_last).zfill(15)}): duplicate IMSIs"))
                break
        ranges.append((start, last, i))
        if g.dnn is not None and g.slice in {s.name for s in spec.slices}:
            own = spec.slice(g.slice).dnn
            if g.dnn not in dnns:
                problems.append((("ue_groups", i, "dnn"),
                                 f"DNN {g.dnn!r} has no slice (slices serve: {', '.join(sorted(dnns))})"))
            elif g.dnn != own:
                problems.append((("ue_groups", i, "dnn"),
                                 f"DNN {g.dnn!r} is not served by slice {g.slice!r} (its DNN is {own!r})"))
    return problems


def testbed_from_yaml(doc: LocatedYaml) -> TestbedSpec:
    spec = validate(TestbedSpec, doc)
    problems = check_testbed(spec)
    if problems:
        raise ConfigError([doc.problem(path, msg) for path, msg in problems])
    return spec


def load_testbed(path: str | Path | None = None) -> TestbedSpec:
    """Load a testbed file, or the built-in default when `path` is None."""
    if path is None:
        text = resources.files("testbed.config").joinpath("default_testbed.yaml").read_text()
        return testbed_from_yaml(parse_yaml(text, "<built-in default testbed>"))
    return testbed_from_yaml(load_yaml_file(path))
