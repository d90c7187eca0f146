"""Every policy on the GPU simulator, on the same traces: `testbed sim compare`.

Each policy runs through `ScalerLoop.decide_all` on a `GpuSimCluster` (the batched path, with
interference unless turned off), all services sharing the GPUs. The figures per policy: mean
per-period SLO violation rate, GPU share held (in DRAFAS units of 25 %), requests served within
the SLO per second, Eq. 3.2's reward with share units in place of instances (the same number for
DRAFAS's 25 % slices), decision time per step, and the share bound (`oracle.share_bound`).
With declared pipelines the simulator routes each chain (`GpuSimCluster(chains=...)`) and the row
adds per chain its end-to-end latency, violation rate (late or dropped anywhere) and requests
completed within the chain's SLA. A joint planner asked for some of its model's services runs
beside the others (`testbed.train.partners`). `prepare_comparison` checks and builds every run of
the command before the first one starts; `run_comparison` runs them table by table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from testbed.cluster.base import ServiceTarget
from testbed.config.yamlfile import load_yaml_file
from testbed.errors import ConfigError, ConfigProblem
from testbed.load.trace import Trace
from testbed.profiles import PACKAGED_PROFILES, ServiceProfile, load_profiles
from testbed.profiles.paper import PAPER_TABLES, REWARD_ALPHA, REWARD_BETA, SERVICES
from testbed.scaler.fa2 import Pipeline
from testbed.scaler.factory import PolicyChoice, build_policies
from testbed.scaler.loop import ScalerLoop
from testbed.scaler.registry import PolicyEntry, entries, resolve
from testbed.sim.gpu import UNIT_PCT, GpuSimCluster
from testbed.train.evaluate import default_ratio, test_day_traces
from testbed.train.oracle import share_bound
from testbed.train.partners import JointRun, check_partners, joint_runs, partner_services

TABLE_GPUS = {"5.1": 2, "5.2": 2, "5.3": 32}  # table -> GPUs (8, 8 and 128 units of 25 %)


@dataclass(frozen=True)
class RunSettings:
    """What every run of one comparison shares, whatever the table or the policy."""

    seed: int = 0
    interference: bool = True
    max_steps: int | None = None
    initial: Mapping[str, ServiceTarget] | None = None  # the layout's targets to start from
    pipelines: tuple[Pipeline, ...] = ()  # routed by the simulator
    plan_chain: bool = True  # False: fa2 plans every service alone under its own SLO
    report: tuple[str, ...] = ()  # the services a row reports (empty: all it runs; a joint
    # planner's partners run beside them unreported, testbed.train.partners)


DEFAULT_SETTINGS = RunSettings()


@dataclass(frozen=True)
class TableLoad:
    """One run's load: its label in the report, the GPUs shared and each service's ratio."""

    label: str
    gpus: int
    ratios: Mapping[str, float]


@dataclass(frozen=True)
class LoadChoice:
    """The loads a comparison runs at: the tables', times `scale`, on the layout's GPUs in place of
    each table's where given; `trace_label` names the user's traces (empty: the paper's test day)."""

    tables: tuple[str, ...]
    scale: float = 1.0
    layout_gpus: int | None = None
    trace_label: str = ""


@dataclass
class PolicyResult:
    """One policy at one load: the comparison's row, and the share held at every step."""

    policy: str
    load: str
    steps: int
    slo_violation_rate: float  # mean over services of the per-period mean
    share_units: float  # mean over steps of the share held by all services, in 25 % units
    throughput: float  # requests served within the SLO per second, all services
    reward: float  # mean over services of the mean per-period reward
    decide_ms: float  # mean time the policy took per step, all services
    bound: float  # mean over services of the share bound's reward
    run_seconds: float
    per_service: dict[str, dict[str, float]] = field(default_factory=dict)
    chains: list[dict] = field(default_factory=list)  # GpuSimCluster.chain_results, + on_time_rps
    share_series: list[float] = field(default_factory=list)  # share units held, per step
    partners: list[str] = field(default_factory=list)  # run beside the reported ones, unreported

    def as_json(self, with_series: bool = False) -> dict:
        d = asdict(self)
        if not with_series:
            d.pop("share_series")
        if not self.partners:
            d.pop("partners")
        return d


def comparison_policies(
    name: str,
    services: Sequence[str],
    profiles: Mapping[str, ServiceProfile],
    *,
    total_units: int,
    models: Path | None,
    settings: RunSettings = DEFAULT_SETTINGS,
    profile_source: str = PACKAGED_PROFILES,
    entry: PolicyEntry | None = None,
) -> dict:
    """Policy `name` (registered, or module:Class imported from the working directory) for every
    compared service: one object shared by all of them for a policy that plans shares (a trained
    one from `models/<name>.zip`), one per service otherwise (a trained one from
    `models/<service>.zip`). A scenario's cell, which chooses a policy per service, uses
    `testbed.scaler.factory.build_policies`. `settings`: the seed, and the pipelines fa2 plans
    (unless `plan_chain` is off). `entry`: `name` already resolved (once per command)."""
    entry = entry or resolve(name, source="--policies", field="policies", base_dir=Path.cwd())
    models_of: dict[str, Path | None] = dict.fromkeys(services)
    if entry.needs_model and entry.plan is not None:
        path = (models / f"{name}.zip") if models else None
        if path is None or not path.exists():
            raise ConfigError([ConfigProblem(
                str(path or f"models/{name}.zip"), None, "",
                f"no {name} model here; train one with `testbed train --policy {name}`")])
        models_of = dict.fromkeys(services, path)
    elif entry.needs_model:
        models_of = {s: (models / f"{s}.zip") if models else None for s in services}
        missing = [str(f) for f in models_of.values() if f is None or not f.exists()]
        if missing:
            raise ConfigError([ConfigProblem(m, None, "", f"no {name} model here") for m in missing])
    built = build_policies([PolicyChoice(s, name, models_of[s]) for s in services], profiles,
                           total_units=total_units, seed=settings.seed,
                           pipelines=settings.pipelines if settings.plan_chain else (),
                           profile_source=profile_source, entries={name: entry})
    return built.policies


def run_policy(
    name: str,
    policies: Mapping,
    profiles: Mapping[str, ServiceProfile],
    traces: Mapping[str, Trace],
    load: TableLoad,
    *,
    settings: RunSettings = DEFAULT_SETTINGS,
    bounds: Mapping[str, float] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> PolicyResult:
    """Run one policy over the traces at `load` on every service of `policies`, the row reporting
    those of `settings.report`; `settings.pipelines` are routed (a later stage ignores its trace)."""
    services = list(policies)
    cluster = GpuSimCluster(
        {s: profiles[s] for s in services},
        {s: traces[s] for s in services if s in traces},
        {s: load.ratios[s] for s in services if s in load.ratios},
        gpus=load.gpus,
        seed=settings.seed,
        interference=settings.interference,
        initial=settings.initial,
        chains=settings.pipelines,
    )
    total_units = cluster.total_units()
    loop = ScalerLoop(cluster, policies, cluster.latest_window, clock=lambda: cluster.now,
                      profiles=profiles)
    total_steps = int(min(traces[s].seconds for s in services if s in traces) // cluster.step_seconds)
    if settings.max_steps is not None:
        total_steps = min(total_steps, settings.max_steps)
    tally = _Tally(services, total_units,
                   [s for s in services if not settings.report or s in settings.report])
    started = time.perf_counter()
    steps = 0
    while steps < total_steps and not cluster.done:
        cluster.advance()
        tally.add_step(cluster, loop, policies)
        steps += 1
        if progress is not None and steps % 96 == 0:
            progress(steps, total_steps)
    return tally.result(name, load.label, steps, cluster, bounds, started)


@dataclass
class _Tally:
    """The sums `run_policy` keeps over the steps of one run, and the row they make."""

    services: list[str]
    total_units: int
    shown: list[str]  # the services the row reports
    sums: dict[str, dict[str, float]] = field(init=False)
    series: list[float] = field(default_factory=list)  # share units held, per step
    decide_ms: float = 0.0

    def __post_init__(self) -> None:
        self.sums = {s: {"slo": 0.0, "reward": 0.0, "share": 0.0, "on_time": 0.0} for s in self.services}

    def add_step(self, cluster: GpuSimCluster, loop: ScalerLoop, policies: Mapping) -> None:
        """One step's decisions, on the share held as the step began (before they apply)."""
        held = {s: cluster.share_used_pct(s) / UNIT_PCT for s in self.services}
        self.series.append(sum(held[s] for s in self.shown))
        # a target policy's decision carries the time it took for all its services: count it once
        seen_groups: set[int] = set()
        for d in loop.decide_all():
            group = id(policies[d.service])
            if d.target is None or group not in seen_groups:
                self.decide_ms += d.decide_ms
                seen_groups.add(group)
            out = cluster.last_outcome[d.service]
            a = self.sums[d.service]
            slo = d.slo_violation_rate
            a["slo"] += slo
            a["share"] += held[d.service]
            a["reward"] += -(REWARD_ALPHA * slo + REWARD_BETA * held[d.service] / self.total_units)
            a["on_time"] += out.on_time

    def result(self, name: str, load: str, steps: int, cluster: GpuSimCluster,
               bounds: Mapping[str, float] | None, started: float) -> PolicyResult:
        n = max(steps, 1)
        seconds = n * cluster.step_seconds
        per = {
            s: {"slo_violation_rate": a["slo"] / n, "share_units": a["share"] / n,
                "throughput": a["on_time"] / seconds, "reward": a["reward"] / n,
                **({"bound": bounds[s]} if bounds else {})}
            for s, a in self.sums.items() if s in self.shown
        }
        k = len(self.shown)
        chains = [{**c, "on_time_rps": c["on_time"] / seconds} for c in cluster.chain_results()]
        return PolicyResult(
            policy=name,
            load=load,
            steps=steps,
            slo_violation_rate=sum(p["slo_violation_rate"] for p in per.values()) / k,
            share_units=sum(self.series) / n,
            throughput=sum(p["throughput"] for p in per.values()),
            reward=sum(p["reward"] for p in per.values()) / k,
            decide_ms=self.decide_ms / n,
            bound=sum(bounds.values()) / k if bounds else float("nan"),
            run_seconds=time.perf_counter() - started,
            per_service=per,
            chains=chains,
            share_series=self.series,
        )


def bounds_for(
    profiles: Mapping[str, ServiceProfile],
    traces: Mapping[str, Trace],
    ratios: Mapping[str, float],
    *,
    gpus: int,
    max_steps: int | None = None,
    seed: int = 0,
    services: Sequence[str] | None = None,
    pipelines: Sequence[Pipeline] = (),
) -> dict[str, float]:
    """The share bound per service, on the request sizes `run_policy` draws for `services` (in
    that order, as the policies' mapping has them) and `seed`. A later stage of a pipeline gets
    NaN: its load is the stage before's completions, not a trace the bound could read."""
    names = list(services or profiles)
    routed = {s for p in pipelines for s in p.services[1:]}
    total_units = int(gpus * 100 / UNIT_PCT)
    # the same streams as run_policy's cluster: build it for its draws (its GPUs do not matter)
    draws = GpuSimCluster({s: profiles[s] for s in names}, {s: traces[s] for s in names},
                          {s: ratios[s] for s in names}, gpus=len(names), seed=seed, interference=False)
    return {
        s: share_bound(profiles[s], traces[s], ratios[s], total_units=total_units, steps=max_steps,
                       proc_s=draws.sims[s].proc_s).reward
        if s not in routed else float("nan")
        for s in names
    }


def policy_names(text: str, models: Path, services: Sequence[str] = SERVICES) -> list[str]:
    """The policies `--policies` names (registered names or module:Class references, each
    checked now); all: the registry's compared policies (the paper's), a trained one only when
    `models` holds its agents for `services`."""
    if text == "all":
        have = {name: all((models / f"{s}.zip").exists() for s in services)
                for name, e in entries().items() if e.needs_model and e.build is not None}
        return [name for name, e in entries().items() if e.compared and have.get(name, True)]
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise ConfigError([ConfigProblem("--policies", None, "policies",
                                         "no policy named; give names, module:Class or all")])
    for name in names:
        resolve(name, source="--policies", field="policies", base_dir=Path.cwd())
    return names


def check_gpu_curves(
    profiles: Mapping[str, ServiceProfile], path: Path | None, policies: Sequence[str],
    services: Sequence[str] = SERVICES,
) -> None:
    """The policies that need a gpu curve, against the compared services' profiles: file, line
    and field (a service of one's own without `gpu:` runs DRAFAS's policies only)."""
    missing = [s for s in services if profiles[s].gpu is None]
    if not policies or not missing:
        return
    doc = load_yaml_file(path) if path is not None else None
    raise ConfigError(
        [
            ConfigProblem(
                str(path) if path else PACKAGED_PROFILES,
                doc.line_of(("services", s, "gpu")) if doc else None,
                f"services.{s}.gpu",
                f"{', '.join(policies)} need the profile's gpu curve (batch/share times); it is "
                f"missing (give {s} a gpu: block, or compare it with policies that set no shares)",
            )
            for s in missing
        ]
    )


@dataclass
class Comparison:
    """Every run of one `sim compare`, built and checked before the first one starts."""

    names: list[str]  # the policies, in the order they run at each table
    loads: LoadChoice  # the tables whose loads they run at
    services: list[str]  # the services compared, sharing the GPUs
    profiles: dict[str, ServiceProfile]
    traces: dict[str, Trace]
    policies: dict[tuple[str, str], dict]  # (table, policy name) -> its policy object per service
    settings: RunSettings
    joint: dict[str, JointRun] = field(default_factory=dict)  # a planner's partners, by its name

    def gpus(self, table: str) -> int:
        return self.loads.layout_gpus or TABLE_GPUS[table]

    def label(self, table: str) -> str:
        """A run's load: the table's (the paper's), or the user's traces at the table's load."""
        scale = self.loads.scale
        scaled = f" x{scale:g}" if scale != 1 else ""
        if self.loads.trace_label:
            return f"{self.loads.trace_label} at Table {table}'s load{scaled}"
        return f"Table {table}{scaled}"

    def ratios(self, table: str) -> dict[str, float]:
        """Each compared service's request ratio at `table`'s load (a service the table does not
        list: its trace's counts as they are), times `scale`; a joint planner's partners too."""
        given = PAPER_TABLES[table].ratios
        return {s: given.get(s, default_ratio(s)) * self.loads.scale
                for s in [*self.services, *partner_services(self.joint.values())]}

    def load(self, table: str) -> TableLoad:
        return TableLoad(self.label(table), self.gpus(table), self.ratios(table))


def prepare_comparison(
    names: list[str],
    loads: LoadChoice,
    traces: Mapping[str, Trace] | Path,
    *,
    models: Path,
    services: Sequence[str] = SERVICES,
    profiles: Mapping[str, ServiceProfile] | None = None,
    profiles_path: Path | None = None,
    settings: RunSettings = DEFAULT_SETTINGS,
) -> Comparison:
    """Load the profiles (unless given: those of `profiles_path` over the registry's) and the
    traces (a folder: its test day; or each service's own, named by `loads.trace_label`) and build
    every policy at every table's units for `services`, so a bad profile or a missing model stops
    the command before anything runs. A joint planner asked for some of its model's services runs
    on all of them (`testbed.train.partners`), its partners' traces among `traces`."""
    source = str(profiles_path) if profiles_path else PACKAGED_PROFILES
    profiles = dict(profiles) if profiles is not None else load_profiles(profiles_path)
    services = list(services)
    resolved = {n: resolve(n, source="--policies", field="policies", base_dir=Path.cwd())
                for n in names}  # each name once for the command
    planners = [n for n in names if resolved[n].sets_shares]
    check_gpu_curves(profiles, profiles_path, planners, services)
    joint = joint_runs(names, models, services)
    check_partners(joint, services, profiles, profiles_path,
                   None if isinstance(traces, Path) else traces)
    everyone = [*services, *partner_services(joint.values())]
    traces = (test_day_traces(traces, everyone) if isinstance(traces, Path)
              else {s: traces[s] for s in everyone})
    built = {}
    for key in loads.tables:
        units = (loads.layout_gpus or TABLE_GPUS[key]) * 4
        for name in names:
            run = joint[name].services() if name in joint else services
            built[key, name] = comparison_policies(name, run, profiles, total_units=units,
                                                   models=models, settings=settings,
                                                   profile_source=source, entry=resolved[name])
    return Comparison(names, loads, services, profiles, traces, built,
                      replace(settings, report=tuple(services)), joint)


def run_comparison(
    comparison: Comparison,
    *,
    stage: Callable[[str], AbstractContextManager] = lambda _what: nullcontext(),
    on_result: Callable[[str, PolicyResult], None] | None = None,
) -> list[dict]:
    """Every policy at every table's load, each after the share bound on its services' draws (a
    joint planner's with its partners): the report's rows (with the share series). `stage(what)`
    wraps each step (a status line); `on_result(name, result)` gets each run as it ends."""
    c, settings = comparison, comparison.settings
    rows = []
    for key in c.loads.tables:
        load = c.load(key)
        bounds: dict[tuple[str, ...], dict[str, float]] = {}  # the services run -> their bounds
        for name in c.names:
            run = tuple(c.policies[key, name])  # a joint planner's: its partners' draws too
            if run not in bounds:
                with stage(f"{load.label}: share bound"):
                    bounds[run] = bounds_for(c.profiles, c.traces, load.ratios, gpus=load.gpus,
                                             max_steps=settings.max_steps, seed=settings.seed,
                                             services=run, pipelines=settings.pipelines)
            with stage(f"{load.label}: {name}"):
                result = run_policy(name, c.policies[key, name], c.profiles, c.traces, load,
                                    settings=settings, bounds={s: bounds[run][s] for s in c.services})
            if name == "fa2" and settings.pipelines and not settings.plan_chain:
                result.policy = "fa2 (per service)"
            if name in c.joint:
                result.partners = list(c.joint[name].partners)
            rows.append(result.as_json(with_series=True))
            if on_result is not None:
                on_result(name, result)
    return rows


def report_note(comparison: Comparison, seconds: float, runs: int) -> str:
    """The report's line on how the runs were made."""
    c, settings, trace_label = comparison, comparison.settings, comparison.loads.trace_label
    note = (f"{'Traces ' + trace_label if trace_label else 'Test day'}, services "
            f"{', '.join(c.services)}, seed {settings.seed}, interference "
            f"{'on' if settings.interference else 'off'}; {seconds:.0f} s for {runs} runs.")
    if settings.pipelines:
        note += (" Routed: " + "; ".join(f"{' -> '.join(p.services)} under {p.sla_ms:g} ms"
                                         for p in settings.pipelines)
                 + (" (fa2 plans the chain)" if settings.plan_chain
                    else " (fa2 plans each service alone)")
                 + "; a later stage takes no arrivals from its own trace.")
    for run in c.joint.values():
        note += f" Partners: {run.note(c.services, c.traces)}."
    return note


def default_services() -> list[str]:
    return list(SERVICES)
