"""The scenario file: testbed, services, clients, cross-traffic, matrix and expectations."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from testbed.config import LinkSpec, SliceSpec, TestbedSpec, UEGroupSpec, load_testbed
from testbed.config.testbed_spec import Name
from testbed.plugins import is_ref
from testbed.profiles import paper
from testbed.scaler import registry
from testbed.sim.measure import DEFAULT_MEASURE, MEASURES
from testbed.traces import PACKAGE, packaged_traces

# a service's name as profile files key it (checked against the registry and the scenario's file)
ServiceName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,31}$")]


class Strict(BaseModel):
    """A scenario model as strict as the testbed file: unknown keys, a bool for a number, 2.7 for a
    count, NaN and inf are refused."""
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class InlineTestbed(Strict):
    """A testbed written inside the scenario (`testbed:` as a mapping): its link, slices and UE
    groups."""
    name: Name = "scn"
    link: LinkSpec = LinkSpec()
    slices: list[SliceSpec] = Field(min_length=1)
    ue_groups: list[UEGroupSpec] = Field(min_length=1)




class ServiceSpec(Strict):
    """One AI service: its initial replicas and how it is scaled."""

    name: ServiceName  # a registered service, or one of the scenario's `service_profiles:` file
    replicas: int = Field(1, ge=1, le=64)
    # a registered policy (testbed.scaler.registry) or module:Class, imported from the scenario's
    # folder when the scenario loads (check_policies)
    policy: str = "static"
    model: str | None = None  # ppo: a trained PPO model file; inss/ddpg: default models/POLICY.zip
    # the policy's own keyword arguments: a class's __init__ parameters, the rules' thresholds
    # (RuleThresholds' fields), fa2's share_pct/headroom/max_batch (checked when the run builds it)
    policy_args: dict[str, float | int | str | bool] = {}

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if not registry.known(value):
            raise ValueError(registry.unknown_message(value))
        return value

    @model_validator(mode="after")
    def _model_for_ppo(self) -> ServiceSpec:
        entry = None if is_ref(self.policy) else registry.resolve(self.policy)
        if entry is not None and entry.needs_model and entry.build is not None and not self.model:
            raise ValueError(f"policy {self.policy!r} needs `model:` (a file made by `testbed train`)")
        return self


class ClientSpec(Strict):
    """A load client in a UE group: a trace replay or a constant rate, for one service."""

    service: ServiceName
    ue_group: str | None = None  # required on the testbed engine
    trace: str | None = None  # `DURATION COUNT` lines; relative to the scenario's traces dir
    ratio: float = Field(1.0, gt=0)
    shift_hours: float = Field(0.0, ge=0, lt=24)
    start_s: float = Field(0.0, ge=0)
    rate: float | None = Field(None, gt=0)  # constant requests per second instead of a trace
    # "keep-alive": requests reuse open connections; "per-request": each request opens its own
    # and closes it (Connection: close), as the dissertation's client does: a new connection
    # starts slow, and where flow queues are hashed, lands in a new queue (docs/slicing.md)
    connections: Literal["keep-alive", "per-request"] = "keep-alive"
    # a request unanswered this long (scenario seconds) is a timeout: an error, an SLO violation
    timeout_s: float = Field(4.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _trace_or_rate(self) -> ClientSpec:
        if (self.trace is None) == (self.rate is None):
            raise ValueError("give exactly one of `trace:` or `rate:`")
        return self


class TraceUnits(Strict):
    """The units of CSV traces' columns where their header states none (docs/traces.md); a
    header's own unit wins."""

    time: str | None = None  # the time or interval column's: ms, s, min, h
    rate: str | None = None  # the rate column's: per_s, per_min, per_h

    @model_validator(mode="after")
    def _known(self) -> TraceUnits:
        from testbed.load.trace_csv import caller_unit  # numpy: not at the scenario's import

        for kind in ("time", "rate"):
            if getattr(self, kind) is not None:
                caller_unit(getattr(self, kind), kind)
        return self


class PipelineSpec(Strict):
    """A chain of services one request passes through under one end-to-end SLA (fa2 plans it
    with FA2's Algorithm 1 instead of service by service)."""

    services: list[ServiceName] = Field(min_length=1)
    sla_ms: float = Field(gt=0)


class CrossTrafficSpec(Strict):
    """iperf3 flows from a slice's UE to the data network (or back), for the whole cell."""

    slice: str
    flows: int = Field(1, ge=0, le=128)
    direction: Literal["uplink", "downlink"] = "downlink"


class PlanSpec(Strict):
    """What the judge plans each check's power with, per service, where a pilot run knows better
    than the profile (testbed.scenario.plan): the latencies' standard deviation and mean
    (default: the profile's processing-time range, uniform) and the SLO violation rate (default:
    the share of that range above the SLO)."""

    latency_sd_ms: dict[str, float] = Field(default_factory=dict)
    latency_ms: dict[str, float] = Field(default_factory=dict)
    violation_rate: dict[str, float] = Field(default_factory=dict)


class Scenario(Strict):
    """A scenario file: the testbed, services, clients, cross-traffic, the matrix of cells, the
    `expect:` checks and how long, how fast and how often each cell runs (the fields' comments
    say what each means; README's "Scenarios and reports" shows a file)."""
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    description: str = ""
    engine: Literal["testbed", "sim"] = "testbed"  # sim: every cell through the simulator
    markers: list[Literal["slow", "needs_root"]] = Field(default_factory=list)  # for pytest
    testbed: str | InlineTestbed | None = None  # a testbed file, inline, or the built-in default
    duration_s: float = Field(gt=0, le=31 * 86400)  # per cell, in scenario time (wall time = / time_scale)
    # testbed engine: seconds of load and scaling before the measured window (the trace before each
    # client's start_s), so that replica start-up is not what the window measures; its samples,
    # decisions and requests are kept, marked, and left out of the results
    warmup_s: float = Field(0.0, ge=0, le=86400)
    time_scale: float = Field(1.0, gt=0, le=1000)
    # local testbed: what the emulated replicas do in their profile's time. real: the handler's
    # work (decode the JPEGs, synthesise the WAV) padded to the drawn time; sleep: only the time,
    # answering in the same shape, for time scales at which the work itself cannot keep up on the
    # machine (the network path is unchanged). The lab runs the real services.
    replica_work: Literal["real", "sleep"] = "real"
    scaler_period_s: float = Field(paper.STEP_SECONDS, gt=0, le=86400)
    total_units: int = Field(8, ge=1, le=1024)
    repetitions: int = Field(1, ge=1, le=100)
    seed: int = 0
    # where relative trace paths live (default: the scenario's folder; `package`: the paper's
    # traces, shipped with testbed, testbed/traces)
    traces_dir: str | None = None
    trace_units: TraceUnits = Field(default_factory=TraceUnits)  # for CSV traces without them
    services: list[ServiceSpec] = Field(min_length=1)
    clients: list[ClientSpec] = Field(default_factory=list)
    cross_traffic: list[CrossTrafficSpec] = Field(default_factory=list)
    matrix: dict[str, list[Any]] = Field(default_factory=dict)
    expect: list[str] = Field(default_factory=list)
    plan: PlanSpec = Field(default_factory=PlanSpec)  # the spreads the judge sizes `expect:` with
    compare_sim: bool = False  # also run each cell through the simulator (sim-to-testbed check)
    pipelines: list[PipelineSpec] = Field(default_factory=list)  # for fa2
    service_profiles: str | None = None  # profile YAML merged over Table 4.4 (`testbed profile`)
    # profile fields changed for this scenario, per service, over the file's and the registry's
    # (a `rule:`/`request:`/`deploy:`/`gpu:` block field by field): `profiles.xrpose.capacity` in a
    # matrix sweeps one (testbed.scenario.profiles)
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # local testbed: stretch each replica's time by InSS's interference term for its neighbours on
    # the emulated GPU (as `testbed sim compare` does); off = DRAFAS's configuration. On the lab
    # the GPUs interfere by themselves.
    interference: bool = False
    # where the scaler and the results read the cell's metrics on the local profile: the load
    # balancer in process, or a Prometheus server of the run's own scraping the mesh-shaped series
    # it exports (the lab's queries, and the comparison of both sources per cell); the lab always
    # reads its Prometheus
    metrics: Literal["in-process", "prometheus"] = "in-process"
    # how each scaler period is read (testbed.sim.measure.MEASURES): "harness", the engine's own
    # way; "drafas", as the DRAFAS testbed's Prometheus read its Envoy sidecars and pods: in the
    # simulator, and on the local profile and the lab from Prometheus (testbed.metrics.drafas;
    # the local cell starts its own, as with `metrics: prometheus`; docs/table-5.4.md)
    measure: str = DEFAULT_MEASURE

    @field_validator("measure")
    @classmethod
    def _known_measure(cls, value: str) -> str:
        if value not in MEASURES:
            raise ValueError(f"unknown way of measuring {value!r}; known: {', '.join(MEASURES)}")
        return value

    @property
    def client_drift(self) -> float:
        """Seconds per second the clients' schedule runs slower than the scenario's clock: the way
        of measuring's client drift on the testbed engine (`measure: drafas`: 1 ms/s), else 0."""
        measurement = MEASURES[self.measure].measurement
        if self.engine != "testbed" or measurement is None:
            return 0.0
        return measurement.phase_drift

    def service(self, name: str) -> ServiceSpec:
        """The ServiceSpec called `name` (StopIteration if none is)."""
        return next(s for s in self.services if s.name == name)


def resolve_testbed(scn: Scenario, base_dir: Path) -> TestbedSpec:
    """The testbed of `scn`: its file (relative to `base_dir`, the scenario's folder), the one
    written inline, or the built-in default."""
    if scn.testbed is None:
        return load_testbed()
    if isinstance(scn.testbed, str):
        return load_testbed(base_dir / scn.testbed)
    inline = scn.testbed
    return TestbedSpec(name=inline.name, link=inline.link, slices=inline.slices,
                       ue_groups=inline.ue_groups)


def read_trace(scn: Scenario, path: Path) -> Any:
    """The `Trace` in `path`, one of `scn`'s client traces, read with its `trace_units:`."""
    from testbed.load.trace import load_trace  # numpy: not at import

    return load_trace(path, time_unit=scn.trace_units.time, rate_unit=scn.trace_units.rate)


def trace_dir(scn: Scenario, base_dir: Path) -> Path:
    """Where the relative trace paths of `scn` live: its `traces_dir` (relative to `base_dir`, the
    scenario's folder; `package`: the paper's traces shipped with testbed), else that folder.

    scn: the scenario; base_dir: its folder."""
    if scn.traces_dir == PACKAGE:
        return packaged_traces()
    return (base_dir / scn.traces_dir) if scn.traces_dir else base_dir
