"""What a service is beside its timing: the request a client sends, the handler an emulated replica
runs, the thresholds of the rule-based scalers, and how the lab deploys it.

Each is a field of the service's profile (`testbed.profiles.ServiceProfile`), so that a service of
one's own is a profile file, with a module beside it only where the defaults do not fit."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from testbed.plugins import REF_PATTERN

Ref = Annotated[str, StringConstraints(pattern=REF_PATTERN)]


class RequestSpec(BaseModel):
    """The default request of a service with no `client:` of its own: `upload_bytes` of payload
    sent with `method` to `path`, answered with `response_bytes` by the default replica handler."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    upload_bytes: int = Field(default=1024, ge=0, le=64 << 20, description="request body, bytes")
    response_bytes: int = Field(default=1024, ge=0, le=64 << 20, description="response body, bytes")
    method: Literal["GET", "POST"] = Field(default="POST", description="HTTP method (GET: no body)")
    path: str = Field(default="", pattern=r"^(/[\w./-]*)?$",
                      description="the request path; empty: /<service name>")

    def path_for(self, service: str) -> str:
        """The request path of `service`: `path`, or /<service name> when none is given."""
        return self.path or f"/{service}"


class RuleThresholds(BaseModel):
    """The thresholds of rule v1 (Algorithm 2, Table 4.9) and rule v2 (Algorithm 4, Table 4.10).

    The defaults, for a service the dissertation did not tune, are the means of its three services'
    tuned values, rounded: a start that `testbed tune` improves on. The paper's three services take
    their own values from Tables 4.9/4.10 (testbed.profiles.paper)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    inst_util_high_2: float = Field(default=0.87, ge=0, le=1, description="v1: +2 above this utilization")
    inst_util_high_1: float = Field(default=0.80, ge=0, le=1, description="v1: +1 above this utilization")
    inst_util_low_1: float = Field(default=0.41, ge=0, le=1, description="v1: -1 below this utilization")
    inst_util_low_2: float = Field(default=0.17, ge=0, le=1, description="v1: -2 below this utilization")
    slo_high: float = Field(default=0.089, ge=0, le=1, description="v2: +1 above this SLO violation rate")
    slo_low: float = Field(default=0.0008, ge=0, le=1, description="v2: -1 needs the rate below this")
    inst_util_high: float = Field(default=0.90, ge=0, le=1, description="v2: +1 above this utilization")
    inst_util_low: float = Field(default=0.31, ge=0, le=1, description="v2: -1 needs utilization below this")

    def v1(self) -> dict[str, float]:
        """The four thresholds of rule v1 by name."""
        return {k: getattr(self, k) for k in
                ("inst_util_high_2", "inst_util_high_1", "inst_util_low_1", "inst_util_low_2")}

    def v2(self) -> dict[str, float]:
        """The four thresholds of rule v2 by name."""
        return {k: getattr(self, k) for k in ("slo_high", "slo_low", "inst_util_high", "inst_util_low")}


class DeploySpec(BaseModel):
    """How the lab runs the service on K3s: its container image, the port it listens on, whether a
    replica takes an MPS share of a GPU (one `units` of the profile), its readiness path and its CPU
    and memory. The lab's manifest of the service is generated from this (testbed.cluster.manifest)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(min_length=1, pattern=r"^[\w./:@-]+$", description="container image reference")
    port: int = Field(ge=1, le=65535, description="the container's HTTP port")
    gpu: bool = Field(default=True, description="each replica asks for `units` MPS shares")
    command: list[str] | None = Field(default=None, description="the container's command, if not the image's")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment of the container")
    health_path: str = Field(default="/healthz", pattern=r"^/[\w./-]*$",
                             description="readiness probe path")
    cpu: str = Field(default="1", pattern=r"^\d+(\.\d+)?m?$",
                     description="CPU each replica requests and is limited to (a Kubernetes quantity)")
    memory: str = Field(default="2Gi", pattern=r"^\d+(\.\d+)?([EPTGMk]i?)?$",
                        description="memory each replica requests and is limited to (a Kubernetes quantity)")
