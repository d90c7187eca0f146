"""Service profiles (capacity, queue, processing time, startup, SLO): the numbers that describe a
service to the emulated replicas, the load balancer and the simulator, loaded from YAML."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from testbed.config.yamlfile import load_yaml_file, parse_yaml, validate
from testbed.errors import ConfigError, ConfigProblem

SERVICES = ("chatbot", "imgcls", "tts")


class ServiceProfile(BaseModel):
    """How one replica of a service behaves (dissertation Table 3.1 / Table 4.4)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    capacity: int = Field(ge=1, description="requests one replica processes at the same time")
    queue_limit: int = Field(ge=0, description="requests waiting per replica; more are dropped")
    proc_time_ms: tuple[float, float] = Field(description="processing time range [min, max], ms")
    startup_ms: float = Field(ge=0, description="time from start until /healthz is ready, ms")
    slo_ms: float = Field(gt=0, description="latency threshold above which a request violates")
    units: int = Field(default=1, ge=1, description="resource units (vGPUs) per replica")

    @model_validator(mode="after")
    def _range_ordered(self) -> ServiceProfile:
        lo, hi = self.proc_time_ms
        if lo < 0 or hi < lo:
            raise ValueError(f"proc_time_ms must be [min, max] with 0 <= min <= max, got [{lo}, {hi}]")
        return self

    @property
    def mean_proc_time_ms(self) -> float:
        return (self.proc_time_ms[0] + self.proc_time_ms[1]) / 2


class ProfileSet(BaseModel):
    """The file format: `services: {name: ServiceProfile}`."""

    model_config = ConfigDict(extra="forbid")

    services: dict[str, ServiceProfile]


def default_profiles() -> dict[str, ServiceProfile]:
    """Table 4.4 of the dissertation, from the packaged profiles.yaml."""
    text = resources.files("testbed.cluster").joinpath("profiles.yaml").read_text(encoding="utf-8")
    return validate(ProfileSet, parse_yaml(text, "testbed/cluster/profiles.yaml")).services


def load_profiles(path: str | Path | None = None) -> dict[str, ServiceProfile]:
    """Profiles from `path` merged over the defaults (a file may describe only some services)."""
    profiles = default_profiles()
    if path is None:
        return profiles
    doc = load_yaml_file(path)
    profiles.update(validate(ProfileSet, doc).services)
    return profiles


def profile_for(
    profiles: dict[str, ServiceProfile], service: str, source: str = "services"
) -> ServiceProfile:
    try:
        return profiles[service]
    except KeyError:
        known = ", ".join(sorted(profiles))
        raise ConfigError(
            [ConfigProblem(source, None, service, f"unknown service (known: {known})")]
        ) from None


def dump_profiles(profiles: dict[str, ServiceProfile]) -> str:
    """YAML text in the same format `load_profiles` reads."""
    data = {"services": {name: _plain(p) for name, p in sorted(profiles.items())}}
    return yaml.safe_dump(data, sort_keys=False)


def write_profiles(path: str | Path, profiles: dict[str, ServiceProfile]) -> None:
    Path(path).write_text(dump_profiles(profiles), encoding="utf-8")


def _plain(p: ServiceProfile) -> dict[str, object]:
    d = p.model_dump()
    d["proc_time_ms"] = [round(float(x), 3) for x in p.proc_time_ms]
    return d
