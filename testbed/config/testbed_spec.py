"""The testbed file: slices, UE groups and the bottleneck link, as pydantic models."""

from __future__ import annotations

import ipaddress
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from testbed.config.yamlfile import FieldPath, LocatedYaml, load_yaml_file, parse_yaml, validate
from testbed.errors import ConfigError

# Names end up inside namespace and interface names (15-char limit), so keep them short.
Name = Annotated[str, Field(pattern=r"^[a-z][a-z0-9]{0,11}$")]
_SD = re.compile(r"^(0x)?([0-9a-fA-F]{6})$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LinkSpec(Strict):
    """The bottleneck between the UPF and the data network (N6 uplink, N3 downlink)."""

    capacity_mbit: float = Field(100.0, gt=0, le=100_000)
    delay_ms: float = Field(0.0, ge=0, le=10_000)
    queue_packets: int = Field(100, ge=2, le=100_000)
    slicing: bool = True


class SliceSpec(Strict):
    """A network slice: an S-NSSAI, a DNN, a UE subnet and a share of the bottleneck."""

    name: Name
    sst: int = Field(ge=1, le=255)
    sd: str | None = None
    dnn: str = Field("internet", pattern=r"^[A-Za-z0-9][A-Za-z0-9.\-]{0,62}$")
    subnet: ipaddress.IPv4Network
    guaranteed_mbit: float = Field(0.0, ge=0)
    ceiling_mbit: float | None = Field(None, gt=0)

    @field_validator("sd", mode="before")
    @classmethod
    def _sd_is_hex(cls, value: object) -> object:
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError(
                "sd must be a quoted string of 6 hex digits such as \"000001\" "
                "(unquoted, YAML reads it as a number)"
            )
        m = _SD.match(value)
        if not m:
            raise ValueError(f"sd must be 6 hex digits (24 bits), got {value!r}")
        return m.group(2).lower()

    @field_validator("subnet", mode="before")
    @classmethod
    def _subnet_is_network(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return ipaddress.IPv4Network(value, strict=True)
            except ValueError as exc:
                raise ValueError(f"not an IPv4 network in CIDR form: {exc}") from None
        return value

    @property
    def snssai(self) -> tuple[int, str | None]:
        return (self.sst, self.sd)

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        return self.subnet.network_address + 1


class UEGroupSpec(Strict):
    """UEs that share a slice; on the local profile one network namespace per group."""

    name: Name
    slice: Name
    count: int = Field(1, ge=1, le=1000)


class TestbedSpec(Strict):
    """A whole testbed: what `testbed up` realises."""

    __test__ = False

    name: Name = "main"
    profile: Literal["local", "lab"] = "local"
    link: LinkSpec = LinkSpec()
    dn_subnet: ipaddress.IPv4Network = ipaddress.IPv4Network("10.200.0.0/24")
    slices: list[SliceSpec] = Field(min_length=1)
    ue_groups: list[UEGroupSpec] = Field(min_length=1)

    def slice(self, name: str) -> SliceSpec:
        for s in self.slices:
            if s.name == name:
                return s
        raise KeyError(name)

    def groups_of(self, slice_name: str) -> list[UEGroupSpec]:
        return [g for g in self.ue_groups if g.slice == slice_name]


def check_testbed(spec: TestbedSpec) -> list[tuple[FieldPath, str]]:
    """Cross-field rules that a single field cannot check; returns (path, message) pairs."""
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
        if s.ceiling_mbit is not None and s.ceiling_mbit > spec.link.capacity_mbit:
            problems.append((("slices", i, "ceiling_mbit"),
                             f"ceiling {s.ceiling_mbit} exceeds link capacity "
                             f"{spec.link.capacity_mbit}"))
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
        if total > spec.link.capacity_mbit + 1e-9:
            problems.append((("slices", i, "guaranteed_mbit"),
                             f"guarantees add up to {total:g} Mbit/s, above the link capacity "
                             f"{spec.link.capacity_mbit:g} Mbit/s"))
            break
    group_names: dict[str, int] = {}
    ues_per_slice: dict[str, int] = {}
    for i, g in enumerate(spec.ue_groups):
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
