"""The scenario file: testbed, services, clients, cross-traffic, matrix and expectations."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from testbed.config import LinkSpec, SliceSpec, TestbedSpec, UEGroupSpec, check_testbed, load_testbed
from testbed.config.testbed_spec import Name
from testbed.errors import ConfigError
from testbed.plugins import is_ref
from testbed.profiles import load_profiles, paper
from testbed.profiles.registry import known_services
from testbed.scaler import registry
from testbed.scaler.ppo import read_manifest
from testbed.scaler.share import read_share_meta
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


def check_scenario(scn: Scenario, testbed: TestbedSpec, base_dir: Path) -> list[tuple[tuple, str]]:
    """Cross-references: names that must exist, files that must be there.

    scn: the scenario; testbed: its resolved testbed; base_dir: the scenario's folder. Returns
    (field path, message) pairs."""
    problems: list[tuple[tuple, str]] = []
    seen: set[str] = set()
    models: set[str] = set()
    for i, s in enumerate(scn.services):
        if s.name in seen:
            problems.append((("services", i, "name"), f"service {s.name!r} listed twice"))
        seen.add(s.name)
        if s.model and s.model not in models and not (base_dir / s.model).is_file():
            models.add(s.model)  # named once, where it first appears
            problems.append((("services", i, "model"), f"model file {s.model!r} not found"))
    staged: dict[str, int] = {}
    for i, pipe in enumerate(scn.pipelines):
        for j, name in enumerate(pipe.services):
            if name not in seen:
                problems.append((("pipelines", i, "services", j), f"no service {name!r} in `services:`"))
            elif name in staged:
                problems.append((("pipelines", i, "services", j),
                                 f"{name} is already a stage of pipelines[{staged[name]}]: a service "
                                 "is in one pipeline, once"))
            staged.setdefault(name, i)
    if scn.engine == "sim" and scn.pipelines:
        # the simulator routes a chain: a later stage's requests are the stage before's completions
        later = {name: i for i, p in enumerate(scn.pipelines) for name in p.services[1:]}
        for i, c in enumerate(scn.clients):
            if c.service in later:
                chain = " -> ".join(scn.pipelines[later[c.service]].services)
                problems.append((("clients", i, "service"),
                                 f"{c.service} is a later stage of pipelines[{later[c.service]}] "
                                 f"({chain}): the simulator feeds it the stage before's completed "
                                 "requests, so it takes no client of its own; remove this client"))
        heads = {c.service for c in scn.clients}
        for i, p in enumerate(scn.pipelines):
            if p.services and p.services[0] not in heads and p.services[0] in seen:
                problems.append((("pipelines", i, "services", 0),
                                 f"the first stage {p.services[0]} has no client: the pipeline "
                                 "would see no requests"))
        if scn.total_units % 4:
            problems.append((("total_units",), "a routed pipeline runs on the GPU simulator: "
                                               "total_units must be whole GPUs (a multiple of 4)"))
    profiles = None
    if scn.service_profiles:
        if not (base_dir / scn.service_profiles).is_file():
            problems.append((("service_profiles",),
                             f"profile file {scn.service_profiles!r} not found"))
        else:
            profiles = load_profiles(base_dir / scn.service_profiles)  # its own errors name its lines
    if profiles is not None or not scn.service_profiles:
        known = profiles if profiles is not None else load_profiles()
        for i, s in enumerate(scn.services):
            if s.name not in known:
                problems.append((("services", i, "name"), f"unknown service {s.name!r}: "
                                 f"{known_services(known, scn.service_profiles)}"))
    problems += _check_warmup(scn)
    problems += _check_measure(scn)
    groups = {g.name for g in testbed.ue_groups}
    slices = {s.name for s in testbed.slices}
    traces = trace_dir(scn, base_dir)
    for i, c in enumerate(scn.clients):
        if c.service not in seen:
            problems.append((("clients", i, "service"),
                             f"no service {c.service!r} in `services:` ({', '.join(sorted(seen))})"))
        if scn.engine == "testbed" and c.ue_group is None:
            problems.append((("clients", i), "a client on the testbed engine needs `ue_group:`"))
        elif scn.engine == "testbed" and c.ue_group not in groups:
            problems.append((("clients", i, "ue_group"),
                             f"no UE group {c.ue_group!r} (groups: {', '.join(sorted(groups))})"))
        if c.trace and not (traces / c.trace).is_file():
            problems.append((("clients", i, "trace"), f"trace file {traces / c.trace} not found"))
    for i, x in enumerate(scn.cross_traffic):
        if x.slice not in slices:
            problems.append((("cross_traffic", i, "slice"),
                             f"no slice {x.slice!r} (slices: {', '.join(sorted(slices))})"))
    problems += [(("testbed", *p), m) for p, m in check_testbed(testbed)]
    return problems


def _check_measure(scn: Scenario) -> list[tuple[tuple, str]]:
    """A way of measuring other than the harness's reads the DRAFAS simulator's periods, not the
    GPU simulator's a routed pipeline needs; the testbed engine reads it from Prometheus."""
    if scn.measure != DEFAULT_MEASURE and scn.pipelines:
        return [(("measure",), f"measure: {scn.measure} reads the DRAFAS simulator's periods; a "
                               "routed pipeline runs on the GPU simulator, which reads them the "
                               f"harness's way (measure: {DEFAULT_MEASURE})")]
    return []


def _check_warmup(scn: Scenario) -> list[tuple[tuple, str]]:
    """A warm-up is whole scaler periods (each reward period is warm-up or measured, never both)
    of the trace before each client's window, on the engine that has replicas to start."""
    if not scn.warmup_s:
        return []
    problems: list[tuple[tuple, str]] = []
    if scn.engine == "sim":
        problems.append((("warmup_s",), "a warm-up is for the testbed engine: the simulator's "
                                        "cells run the measured window only"))
    periods = scn.warmup_s / scn.scaler_period_s
    if abs(periods - round(periods)) > 1e-9:
        problems.append((("warmup_s",), f"{scn.warmup_s:g} s is not a whole number of scaler "
                                        f"periods ({scn.scaler_period_s:g} s): a decision's reward "
                                        "period would be part warm-up, part measured"))
    for i, c in enumerate(scn.clients):
        if c.trace and c.start_s < scn.warmup_s:
            problems.append((("clients", i, "start_s"),
                             f"the warm-up replays the {scn.warmup_s:g} s of the trace before "
                             f"start_s: start_s must be at least {scn.warmup_s:g} (here "
                             f"{c.start_s:g})"))
    return problems


def _sets_shares(policy: str) -> bool:
    return not is_ref(policy) and registry.resolve(policy).sets_shares


def check_policies(scn: Scenario, base_dir: Path, params: dict[str, Any] | None = None,
                   profiles: Mapping[str, Any] | None = None) -> list[tuple[tuple, str]]:
    """Every policy of a cell: a `module:Class` imported from the scenario's folder (a module that
    fails to import, a missing class or one with no `act`), and one that sets MPS shares where it
    cannot (the simulator engine, a service without a `gpu:` curve), each a problem at its line
    (the matrix key's where the cell's policy comes from the matrix).

    scn: the scenario (or a cell's); base_dir: where modules are imported from; params: the cell's
    matrix values; profiles: the cell's service profiles (None: the gpu curve is not checked)."""
    problems: list[tuple[tuple, str]] = []
    swept = [k for k in (params or {}) if k == "policy" or k.endswith(".policy")]
    for i, s in enumerate(scn.services):
        where = ("matrix", swept[0]) if swept else ("services", i, "policy")
        if not is_ref(s.policy):
            problems += [(where, m) for m in _share_problems(scn, s, profiles)]
            problems += _agent_problems(s, i, base_dir)
            problems += _options_problems(registry.resolve(s.policy), s, i, where, swept)
            continue
        try:
            entry = registry.resolve(s.policy, base_dir=base_dir)
        except ConfigError as exc:
            problems.append((where, exc.problems[0].message))
            continue
        problems += _options_problems(entry, s, i, where, swept)
    return problems


def _options_problems(entry: registry.PolicyEntry, s: ServiceSpec, i: int, where: tuple,
                      swept: list[str]) -> list[tuple[tuple, str]]:
    """`policy_args:` the service's policy does not take, at its line (the matrix key's where the
    cell's policy comes from the matrix)."""
    problem = entry.options_problem(s.policy_args)
    if problem is None:
        return []
    return [(where if swept else ("services", i, "policy_args"), problem)]


def _agent_problems(s: ServiceSpec, i: int, base_dir: Path) -> list[tuple[tuple, str]]:
    """A trained agent of one service (ppo's `model:`) given to another: it would load only
    when the cell starts."""
    entry = registry.resolve(s.policy)
    if not (entry.needs_model and entry.build is not None and s.model):
        return []
    path = base_dir / s.model
    if not path.is_file():
        return []  # check_scenario names the missing file
    try:
        agent = read_manifest(path)["service"]
    except ConfigError as exc:
        return [(("services", i, "model"), exc.problems[0].message)]
    if agent != s.name:
        return [(("services", i, "model"),
                 f"{s.model} is an agent trained for {agent}, not {s.name}: train one with "
                 f"`testbed train {s.name} --profiles FILE --trace FILE`")]
    return []


def _share_problems(scn: Scenario, s: ServiceSpec, profiles: Mapping[str, Any] | None
                    ) -> list[str]:
    """Why a policy that sets MPS shares and batch sizes (fa2, gslice, inss, ddpg) cannot run for
    service `s` of this cell: the simulator engine runs DRAFAS's configuration (25 % slices, batch
    1), and a planner needs the service's `gpu:` curve (its batch and share times)."""
    if not _sets_shares(s.policy):
        return []
    if scn.engine == "sim" or scn.compare_sim:
        return [f"{s.policy} sets shares and batches: it runs on the testbed engine (without "
                "compare_sim); on the simulator use `testbed sim compare`"]
    profile = (profiles or {}).get(s.name)
    if registry.resolve(s.policy).needs_model and not s.model:
        return []  # the shipped actor: check_share_models names the services it plans
    if profile is not None and profile.gpu is None:
        where = f" in {scn.service_profiles}" if scn.service_profiles else ""
        return [f"{s.policy} sets shares and batches from the service's GPU curve, and "
                f"{s.name}'s profile{where} has none: give it `gpu: default` (the built-in "
                "curve) or a `gpu:` block of its own, or choose a policy that sets no shares"]
    return []


def check_share_models(scn: Scenario, base_dir: Path, params: dict[str, Any] | None = None
                       ) -> list[tuple[tuple, str]]:
    """inss/ddpg in one cell: the model file (the service's `model:`, else the shipped
    models/POLICY.zip) is a model of that policy, trained for exactly the services that use it,
    one file per policy, and the drl extra that runs it is installed.

    scn: the scenario (or a cell's); base_dir: the scenario's folder; params: the cell's matrix
    values."""
    import importlib.util


    problems: list[tuple[tuple, str]] = []
    if scn.engine == "sim":
        return problems  # check_policies refuses a share planner there, whatever its model
    from_matrix = "policy" in (params or {})
    actors = [name for name, e in registry.entries().items()
              if e.sets_shares and e.default_model is not None]  # trained actors: inss, ddpg
    for kind in actors:
        users = [(i, s) for i, s in enumerate(scn.services) if s.policy == kind]
        if not users:
            continue
        i, first = users[0]
        where = ("services", i, "model") if first.model else (
            ("matrix", "policy") if from_matrix else ("services", i, "policy"))
        files = {s.model for _, s in users}
        if len(files) > 1:
            problems.append((("services", users[1][0], "model"),
                             f"every {kind} service uses one actor: give them the same `model:`"))
            continue
        path = base_dir / first.model if first.model else registry.entries()[kind].default_model
        if not path.is_file():
            problems.append((where, f"no {kind} model at {path}: give `model:` or train one "
                                    f"with `testbed train --policy {kind}`"))
            continue
        try:
            meta = read_share_meta(path)
        except ConfigError as exc:
            problems.append((where, f"{path}: {exc.problems[0].message}"))
            continue
        names = [s.name for _, s in users]
        if meta.kind != kind:
            problems.append((where, f"{path} is a {meta.kind} model, not {kind}"))
        elif sorted(meta.services) != sorted(names):
            problems.append((where, f"the {kind} model {path.name} plans {', '.join(meta.services)} "
                                    f"together: give each of them `policy: {kind}` (here: "
                                    f"{', '.join(names)})"))
        missing = [m for m in ("stable_baselines3", "torch") if importlib.util.find_spec(m) is None]
        if missing:
            problems.append((where, f"{kind} needs the drl extra ({missing[0]} missing): "
                                    "pip install 'testbed[drl]'"))
    return problems


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
