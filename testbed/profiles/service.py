"""The one service-profile model (capacity, queue, processing time, startup, SLO, units) that the
emulated replicas, the load balancer, the simulator and the lab read, loaded from YAML."""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from testbed.profiles.parts import DeploySpec, Ref, RequestSpec, RuleThresholds

# a service's HTTP servers (each replica and the balancer before them) close a connection that
# stays idle, or has not sent its whole headers, this long (aiohttp's keep-alive timer)
HEADER_TIMEOUT_S = 60.0


class GpuCurve(BaseModel):
    """How one instance's processing time depends on its batch size, its MPS share of a GPU and
    the other instances on the same GPU.

    time(b, s, others) = proc_time(b=1, s=ref) * batch(b) * share(s) * (1 + interference), with
    batch(b) = a*b^2 + c*b + d (FA2 Section IV-A's quadratic, normalised to batch(1) = 1),
    share(s) = (ref / min(s, knee))^k, and InSS Section 4.1's interference term
    alpha_cache * sum(l_j) + alpha_dram * sum(e_j) over the other instances j on the GPU, with
    l_j = cache_util_j * share_j / 100 and e_j = dram_util_j * share_j / 100.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ref_share_pct: float = Field(gt=0, le=100, description="share (%) proc_time_ms was measured at")
    batch_curve: tuple[float, float, float] = Field(
        description="[a, c, d]: time(b)/time(1) = a*b^2 + c*b + d (FA2's quadratic)"
    )
    max_batch: int = Field(default=16, ge=1, description="largest batch the service accepts")
    share_exponent: float = Field(ge=0, description="k in (ref / share)^k")
    share_knee_pct: float = Field(gt=0, le=100, description="share (%) above which time stops falling")
    floor: float = Field(
        default=0.0, ge=0,
        description="F: a pass takes at least F x the work of batch 1 at ref_share_pct (0: no floor)")
    interference: tuple[float, float] = Field(
        description="[alpha_cache, alpha_dram]: InSS's two interference coefficients of this model"
    )
    cache_util: float = Field(ge=0, le=1, description="L2 cache utilisation at 100 % share, alone")
    dram_util: float = Field(ge=0, le=1, description="DRAM bandwidth utilisation at 100 % share, alone")
    sources: dict[str, str] = Field(default_factory=dict, description="field -> where its number comes from")

    @model_validator(mode="after")
    def _check(self) -> GpuCurve:
        if any(x < 0 for x in self.batch_curve) or sum(self.batch_curve) <= 0:
            raise ValueError(f"batch_curve must be 3 numbers >= 0, not all 0, got {list(self.batch_curve)}")
        if any(x < 0 for x in self.interference):
            raise ValueError(f"interference coefficients must be >= 0, got {list(self.interference)}")
        unknown = sorted(set(self.sources) - set(type(self).model_fields))
        if unknown:
            raise ValueError(f"sources names unknown fields: {', '.join(unknown)}")
        return self

    def factor(self, batch: int, share_pct: float) -> float:
        """time(batch, share) / time(1, ref_share): batch_factor x share_factor, held at the floor.

        batch: requests per pass; share_pct: the instance's MPS share, percent of the GPU."""
        work = self.batch_factor(batch) * self.share_factor(share_pct)
        if self.floor <= 0:
            return work
        return max(self.floor, work) / max(self.floor, 1.0)

    def batch_factor(self, batch: int) -> float:
        """The work of a batch over the work of batch 1 (time(batch) / time(1) without a floor)."""
        a, c, d = self.batch_curve
        return (a * batch * batch + c * batch + d) / (a + c + d)

    def share_factor(self, share_pct: float) -> float:
        """The work at a share over the work at ref_share (time(share) / time(ref) without a floor).

        share_pct: the instance's MPS share, percent of the GPU."""
        return (min(self.ref_share_pct, self.share_knee_pct) / min(share_pct, self.share_knee_pct)) ** (
            self.share_exponent
        )

    def pressure(self, share_pct: float) -> tuple[float, float]:
        """(l, e): the L2 cache and DRAM utilisation this instance puts on its GPU.

        share_pct: the instance's MPS share, percent of the GPU."""
        return self.cache_util * share_pct / 100.0, self.dram_util * share_pct / 100.0

    def stretch(self, neighbours: list[tuple[float, float]]) -> float:
        """1 + InSS's interference term for the neighbours' (l, e) pressures."""
        a_cache, a_dram = self.interference
        return 1.0 + a_cache * sum(n[0] for n in neighbours) + a_dram * sum(n[1] for n in neighbours)


def gpu_stretches(placed: Iterable[tuple[Hashable, int, float, GpuCurve | None]]) -> dict[Hashable, float]:
    """1 + InSS's interference term (`GpuCurve.stretch`) for each placed instance, given as
    (key, gpu, share %, its curve), from the pressure of the other instances on the same GPU. An
    instance without a curve neither feels nor (as in the simulator) exerts any pressure."""
    on_gpu: dict[int, list[tuple[Hashable, float, GpuCurve | None]]] = {}
    for key, gpu, share, curve in placed:
        on_gpu.setdefault(gpu, []).append((key, share, curve))
    out: dict[Hashable, float] = {}
    for group in on_gpu.values():
        pressure = [c.pressure(share) if c else (0.0, 0.0) for _, share, c in group]
        for k, (key, _, curve) in enumerate(group):
            out[key] = curve.stretch(pressure[:k] + pressure[k + 1:]) if curve else 1.0
    return out


DEFAULT_GPU_CURVE = "default"  # `gpu: default`: the packaged services' curve (services.yaml)


@functools.cache
def builtin_gpu_curves() -> dict[str, dict[str, Any]]:
    """The GPU curves a profile's `gpu:` may name instead of writing one out (`gpu_curves_in` the
    package's profiles folder): `default` (alias `assumed`) is services.yaml's curve. Name -> the
    curve's fields, as written."""
    return gpu_curves_in(resources.files("testbed.profiles"))


def gpu_curves_in(folder: Any) -> dict[str, dict[str, Any]]:
    """The named curves of a profiles folder: `default` and `assumed`, the `gpu_curve:` of its
    services.yaml; for each file `gpu-NAME.yaml`, `NAME` for a curve (or a `gpu_curve:` block)
    and `NAME:SERVICE` for each service's `gpu:` in a profile file's `services:` (as
    `testbed sim fit-gpu` writes them: `gpu: measured:imgcls`).

    folder: a Path or an importlib.resources Traversable."""
    curves: dict[str, dict[str, Any]] = {}
    packaged = folder.joinpath("services.yaml")
    if packaged.is_file():
        data = yaml.safe_load(packaged.read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("gpu_curve"), dict):
            curves[DEFAULT_GPU_CURVE] = curves["assumed"] = data["gpu_curve"]
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not (entry.name.startswith("gpu-") and entry.name.endswith((".yaml", ".yml"))):
            continue
        name = entry.name[4:].rsplit(".", 1)[0]
        data = yaml.safe_load(entry.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            continue
        if isinstance(data.get("services"), dict):
            for service, block in data["services"].items():
                if isinstance(block, dict) and isinstance(block.get("gpu"), dict):
                    curves[f"{name}:{service}"] = block["gpu"]
        else:
            curve = data.get("gpu_curve", data)
            if isinstance(curve, dict):
                curves[name] = curve
    return curves


class ServiceProfile(BaseModel):
    """How one replica of a service behaves (dissertation Table 3.1 / Table 4.4)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="", description="the service; set from the key in a profile file")
    capacity: int = Field(ge=1, description="requests one replica processes at the same time")
    queue_limit: int = Field(ge=0, description="requests waiting per replica; more are dropped")
    proc_time_ms: tuple[float, float] = Field(description="processing time range [min, max], ms")
    startup_ms: float = Field(ge=0, description="time from start until ready, ms")
    slo_ms: float = Field(gt=0, description="latency threshold above which a request violates")
    units: int = Field(default=1, ge=1, description="resource units (vGPUs) per replica")
    initial_replicas: int = Field(default=1, ge=0, description="replicas at the start of a run")
    rate_limit: tuple[int, float] | None = Field(
        default=None, description="[requests, seconds]: each replica admits at most this many per window"
    )
    startup_max_ms: float | None = Field(
        default=None,
        description="start-up drawn in whole seconds from [startup_ms, this]; None (or less): startup_ms",
    )
    gpu: GpuCurve | None = Field(
        default=None, description="batch/share/interference curve; None: only DRAFAS's 25 %, batch 1"
    )
    request: RequestSpec | None = Field(
        default=None, description="the default request's sizes (without `client:`; default RequestSpec())")
    client: Ref | None = Field(
        default=None, description="module:attr, a request builder and response check (testbed.load.api)")
    handler: Ref | None = Field(
        default=None, description="module:attr, what an emulated replica runs (testbed.cluster.handlers); "
                                  "None: the default handler spends the processing time")
    rule: RuleThresholds = Field(default_factory=RuleThresholds,
                                 description="rule v1/v2 thresholds (defaults: RuleThresholds)")
    deploy: DeploySpec | None = Field(default=None, description="the lab's container (needed on the lab)")
    sources: dict[str, str] = Field(default_factory=dict, description="field -> where its number comes from")

    @field_validator("gpu", mode="before")
    @classmethod
    def _named_curve(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        curves = builtin_gpu_curves()
        if value not in curves:
            raise ValueError(f"unknown GPU curve {value!r}: give a `gpu:` block or a built-in "
                             f"curve's name ({', '.join(curves)})")
        return curves[value]

    @model_validator(mode="after")
    def _check(self) -> ServiceProfile:
        if self.request is not None and self.client is not None:
            raise ValueError("give `request:` (sizes of the default request) or `client:` (a builder "
                             "of your own), not both")
        lo, hi = self.proc_time_ms
        if lo < 0 or hi < lo:
            raise ValueError(f"proc_time_ms must be [min, max] with 0 <= min <= max, got [{lo}, {hi}]")
        if self.rate_limit is not None and (self.rate_limit[0] < 1 or self.rate_limit[1] <= 0):
            raise ValueError(f"rate_limit must be [requests >= 1, seconds > 0], got {list(self.rate_limit)}")
        unknown = sorted(set(self.sources) - set(type(self).model_fields))
        if unknown:
            raise ValueError(f"sources names unknown fields: {', '.join(unknown)}")
        return self

    @property
    def mean_proc_time_ms(self) -> float:
        """The mean of the processing-time range, ms."""
        return (self.proc_time_ms[0] + self.proc_time_ms[1]) / 2

    @property
    def instance_rps(self) -> float:
        """Requests per second one replica serves flat out: capacity / mean processing time."""
        lo, hi = self.proc_time_ms
        return self.capacity * 2000.0 / (lo + hi) if hi > 0 else float("inf")

    @property
    def request_spec(self) -> RequestSpec:
        """The default request: `request:`, or RequestSpec()'s sizes when neither it nor `client:` is
        given (with `client:` the client's builder makes the request, and this is unused)."""
        return self.request if self.request is not None else RequestSpec()

    def time_ms(
        self, batch: int = 1, share_pct: float | None = None, stretch: float = 1.0, *, tail: bool = False
    ) -> float:
        """Mean (or, with `tail`, worst) processing time of one batch at a share, in ms. Without a
        `gpu` curve only batch 1 at the profiled share (share_pct None) is known.

        batch: requests per batch; share_pct: the MPS share (None: the profiled one); stretch: the
        interference factor it is multiplied by."""
        base = self.proc_time_ms[1] if tail else self.mean_proc_time_ms
        if self.gpu is None:
            if batch != 1 or share_pct is not None:
                raise ValueError(f"{self.name}: no gpu curve (batch {batch}, share {share_pct})")
            return base * stretch
        share = self.gpu.ref_share_pct if share_pct is None else share_pct
        if self.gpu.floor > 0:
            return base * self.gpu.factor(batch, share) * stretch
        return base * self.gpu.batch_factor(batch) * self.gpu.share_factor(share) * stretch

    def replace(self, **changes: Any) -> ServiceProfile:
        """A validated copy with `changes` applied (a changed number loses its stated source)."""
        sources = {k: v for k, v in self.sources.items() if k not in changes}
        return type(self).model_validate({**self.model_dump(), "sources": sources, **changes})


class ProfileSet(BaseModel):
    """The file format: `services: {name: ServiceProfile}`, and `sources:` that every service shares
    (a service's own `sources:` win)."""

    model_config = ConfigDict(extra="forbid")

    sources: dict[str, str] = Field(default_factory=dict)
    gpu_curve: GpuCurve | None = Field(
        default=None, description="a shared `gpu:` block for services to reference (&gpu_curve)"
    )
    services: dict[str, ServiceProfile]

    @model_validator(mode="before")
    @classmethod
    def _names_and_shared_sources(cls, data: Any) -> Any:
        services = data.get("services") if isinstance(data, dict) else None
        shared = data.get("sources") if isinstance(data, dict) else None
        if isinstance(services, dict):
            data = {**data, "services": {k: _entry(k, v, shared) for k, v in services.items()}}
        return data


def _entry(name: str, entry: Any, shared: Any) -> Any:
    if not isinstance(entry, dict):
        return entry
    out = {"name": name, **entry}
    if isinstance(shared, dict) and isinstance(entry.get("sources", {}), dict):
        out["sources"] = {**shared, **entry.get("sources", {})}
    return out


def dump_profiles(profiles: dict[str, ServiceProfile]) -> str:
    """YAML text in the same format `load_profiles` reads.

    profiles: the service profiles by name."""
    data = {"services": {name: _plain(p) for name, p in sorted(profiles.items())}}
    return yaml.safe_dump(data, sort_keys=False)


def write_profiles(path: str | Path, profiles: dict[str, ServiceProfile]) -> None:
    """Write `profiles` (name -> ServiceProfile) to `path` as a profile file `load_profiles` reads
    back."""
    Path(path).write_text(dump_profiles(profiles), encoding="utf-8")


def _plain(p: ServiceProfile) -> dict[str, object]:
    d = p.model_dump(exclude={"name"})
    d["proc_time_ms"] = [round(float(x), 3) for x in p.proc_time_ms]
    if p.rate_limit is not None:
        d["rate_limit"] = list(p.rate_limit)
    for key in ("request", "client", "handler", "deploy"):
        if d[key] is None:
            del d[key]
    if p.rule == RuleThresholds():
        del d["rule"]
    if p.gpu is None:
        del d["gpu"]
    else:
        for key in ("batch_curve", "interference"):
            d["gpu"][key] = list(d["gpu"][key])
    if not p.sources:
        del d["sources"]
    return d
