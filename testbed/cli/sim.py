"""Simulator commands: `sim eval`, `sim tables`, `sim compare`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from testbed.cli import TracesOpt, app, checks, console, err_console
from testbed.cli.sim_inputs import (
    RATE_LIMIT_HELP,
    ChosenTraces,
    MeasureOpt,
    ProfilesOpt,
    TraceOpt,
    TraceRateUnitOpt,
    TraceTimeUnitOpt,
    chosen_services,
    chosen_traces,
    default_ratio,
    drl_policies,
    known_profiles,
    layout_targets,
    model_for,
    note_left_out,
    parse_pipeline,
    sim_options,
    sim_profiles,
)
from testbed.cli.sim_tables import TableSetup, sim_table
from testbed.errors import ConfigError, ConfigProblem
from testbed.judge.verdict import EXIT_CODES, worst
from testbed.paths import MODELS_DIR, stamped
from testbed.profiles import paper

if TYPE_CHECKING:

    from testbed.train.compare import PolicyResult
    from testbed.train.evaluate import ServiceResult
    from testbed.train.oracle import OracleResult

sim_app = typer.Typer(
    help="The fast simulator: evaluate policies, reproduce Tables 5.1-5.3.", no_args_is_help=True
)
app.add_typer(sim_app, name="sim")


@sim_app.command("eval")
def sim_eval(
    policy: str = typer.Option(
        "rule_v2", help="A registered policy (rule_v1, rule_v2, static, hpa, random, ppo, or an "
        "installed one) or module:Class, a class of your own importable from here."),
    service: str = typer.Option(
        "all", help="Service(s), comma-separated, each a registered one or one of --profiles; all: "
        "the paper's three (chatbot, imgcls, tts). The chosen services share the units."),
    ratio: float = typer.Option(
        None, help="Request ratio for every chosen service (default: the paper's for its three, "
        "1 for any other service)."),
    load: float = typer.Option(1.0, help="Multiply the default ratios (2 = Table 5.2's load)."),
    units: int = typer.Option(paper.TOTAL_UNITS, help="Total resource units."),
    trace: list[str] = TraceOpt,
    trace_time_unit: str | None = TraceTimeUnitOpt,
    trace_rate_unit: str | None = TraceRateUnitOpt,
    traces: Path = TracesOpt,
    profiles_path: Path = ProfilesOpt,
    model: str = typer.Option(
        None, help="PPO model file, or a directory holding SERVICE.zip files (default: models/)."
    ),
    seed: int = typer.Option(0, help="Simulation seed."),
    rate_limit: str = typer.Option("profile", help=RATE_LIMIT_HELP),
    measure: str = MeasureOpt,
    with_oracle: bool = typer.Option(
        True, "--oracle/--no-oracle", help="Also compute the oracle bound (one static run per count)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per service."),
) -> None:
    """Run a policy on the simulator and print SLO violation, instances, processing time, reward,
    and the oracle bound's reward with the policy's gap to it (policy minus oracle).

    Example: testbed sim eval --policy rule_v2 --service all --json
    Example: testbed sim eval --policy ppo --measure drafas
    Example: testbed sim eval --service mysvc --profiles mysvc.yaml --trace day.txt
    """
    # numpy, the simulator and the policies: loaded only when this command runs (fast CLI start)
    from testbed.scaler.factory import make_policy
    from testbed.scaler.registry import resolve
    from testbed.train.evaluate import evaluate
    from testbed.train.oracle import shared_pool_oracles

    known = known_profiles(profiles_path)
    chosen = chosen_services(service, known)
    note_left_out(known, chosen, profiles_path)
    checks.number("--ratio", ratio, ge=0, le=1e6)
    checks.number("--load", load, ge=0, le=1e6)
    if not 1 <= units <= 100_000:
        raise checks.bad("--units", f"must be 1-100000, got {units}")
    profiles = sim_profiles(rate_limit, chosen, known)
    options = sim_options(measure)
    tr = chosen_traces(trace, traces, chosen, trace_time_unit, trace_rate_unit)
    ratios = {s: ratio if ratio is not None else default_ratio(s) * load for s in chosen}
    _bound_requests(tr.traces, ratios)
    entry = resolve(policy, source="--policy", base_dir=Path.cwd())
    if entry.needs_model and entry.build is not None:  # a trained agent per service: models/SERVICE.zip
        policies = drl_policies(Path(model) if model else MODELS_DIR, chosen)
    else:
        policies = {
            s: make_policy(policy, s, total_units=units, seed=seed, model=model_for(model, s),
                           profiles=profiles, base_dir=Path.cwd())
            for s in chosen
        }
    results = evaluate(policies, tr.traces, ratios, total_units=units, seed=seed, profiles=profiles,
                       options=options)
    bounds: dict[str, OracleResult] = {}
    if with_oracle:
        with console.status("oracle bound: one static run per instance count"):
            bounds = shared_pool_oracles(profiles, tr.traces, ratios, total_units=units, seed=seed)
    _print_eval(policy, units, ratios, results, bounds, as_json, tr, measure)


def _print_eval(
    policy: str, units: int, ratios: dict[str, float], results: dict[str, ServiceResult],
    bounds: dict[str, OracleResult], as_json: bool, traces: ChosenTraces, measure: str,
) -> None:
    """`sim eval`'s results: one JSON object per service (with its trace's name and how it was
    measured), or one table with the bound's gap, titled with the traces it ran on and, read
    another way than the harness's, that way."""
    if as_json:
        for s, r in results.items():
            row = {**r.as_json(), "trace": traces.traces[s].name, "measure": measure}
            if s in bounds:
                row["oracle_reward"] = bounds[s].reward
                row["gap"] = r.reward - bounds[s].reward
            typer.echo(json.dumps(row))
        return
    shared = f"shared by {len(results)} services" if len(results) > 1 else ""
    read = "" if measure == "harness" else f", measure: {measure}"
    table = Table(title=f"{policy} on the simulator ({units} units{', ' if shared else ''}{shared}), "
                        f"on {traces.label()}{read}")
    cols = ["service", "ratio", "SLO violation", "instances", "proc time (s)", "reward"]
    cols += ["oracle reward", "gap"] if bounds else []
    for col in [*cols, "steps/s"]:
        table.add_column(col, justify="right")
    for s, r in results.items():
        cells = [
            s,
            f"{ratios[s]:g}",
            f"{r.slo_violation_rate:.4f}",
            f"{r.instances:.4f}",
            f"{r.proc_time:.4f}",
            f"{r.reward:.4f}",
        ]
        if bounds:
            cells += [f"{bounds[s].reward:.4f}", f"{r.reward - bounds[s].reward:+.4f}"]
        table.add_row(*cells, f"{r.steps_per_second:,.0f}")
    console.print(table)

MAX_SIM_SECONDS = 31 * 86400.0  # simulated time per run (the paper's test day is one)
MAX_SIM_REQUESTS = 50_000_000  # arrivals the simulator holds in memory (about 0.4 GB per array)


def _bound_requests(traces: dict, ratios: dict[str, float]) -> None:
    """Refuse before allocating: the simulator keeps every arrival of a trace in arrays."""
    for s, t in traces.items():
        if t.seconds > MAX_SIM_SECONDS:
            raise ConfigError([ConfigProblem(
                t.name, None, "", f"{t.seconds:,.0f} s of trace; the simulator takes at most "
                f"{MAX_SIM_SECONDS:,.0f} s (31 days) per run")])
        wanted = t.requests * ratios[s]
        if wanted > MAX_SIM_REQUESTS:
            raise ConfigError([ConfigProblem(
                "--ratio", None, s, f"{t.name} at ratio {ratios[s]:g} is {wanted:,.0f} requests; "
                f"the simulator takes at most {MAX_SIM_REQUESTS:,} per service")])


@sim_app.command("tables")
def sim_tables(
    models: Path = typer.Option(
        MODELS_DIR, help="Directory with chatbot.zip, imgcls.zip, tts.zip (default: the shipped agents)."
    ),
    drl: bool = typer.Option(True, "--drl/--no-drl", help="Also run the DRL agents (default)."),
    traces: Path = TracesOpt,
    trace: list[str] = TraceOpt,
    trace_time_unit: str | None = TraceTimeUnitOpt,
    trace_rate_unit: str | None = TraceRateUnitOpt,
    service: list[str] = typer.Option(
        ["all"], help="Services (repeatable or comma-separated; all: the paper's three, the tables' "
        "own). A service the paper did not run takes ratio 1 and has no paper figures."),
    profiles_path: Path = ProfilesOpt,
    table: list[str] = typer.Option(["5.1", "5.2", "5.3"], help="Which tables (repeatable)."),
    seed: int = typer.Option(0, help="Simulation seed."),
    rate_limit: str = typer.Option("profile", help=RATE_LIMIT_HELP),
    measure: str = MeasureOpt,
    with_oracle: bool = typer.Option(
        False, "--oracle/--no-oracle", help="Add the oracle bound and each policy's gap (slow at 128 units)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="One JSON object per table, policy and service instead of tables."
    ),
) -> None:
    """Reproduce Tables 5.1-5.3 (DRL agents and rule-based v2) beside the paper. With --trace or
    other services, the tables' setups (units, ratios) run on them, named by their traces, with
    no paper comparison.

    Example: testbed sim tables --table 5.3 --json
    Example: testbed sim tables --no-drl --trace my-day.txt --table 5.1
    """
    # numpy, the simulator and the policies: loaded only when this command runs (fast CLI start)
    from testbed.scaler.policies import RuleV2

    known = [k for k in paper.PAPER_TABLES if k != "4.11"]
    for key in table:
        if key not in known:
            raise ConfigError(
                [ConfigProblem("--table", None, "table", f"unknown {key!r}; use {', '.join(known)}")]
            )
    registry = known_profiles(profiles_path)
    services = chosen_services(service, registry)
    note_left_out(registry, services, profiles_path)
    tr = chosen_traces(trace, traces, services, trace_time_unit, trace_rate_unit)
    profiles = sim_profiles(rate_limit, services, registry)
    options = sim_options(measure)
    runs: dict[str, dict] = {"rule_v2": {s: RuleV2.for_service(s, profiles) for s in services}}
    if drl:
        runs = {paper.PAPER_POLICY["ppo"]: drl_policies(models, services), **runs}
    setup = TableSetup(tr, profiles, seed=seed, with_oracle=with_oracle, as_json=as_json,
                        paper=tr.paper and services == list(paper.SERVICES), options=options,
                        measure=measure)
    verdicts = [sim_table(key, runs, setup) for key in table]
    # the tables' worst, by the one rule's exit codes (testbed.judge.verdict)
    code = EXIT_CODES[worst(v for v in verdicts if v is not None)]
    if code:
        raise typer.Exit(code)


@sim_app.command("compare")
def sim_compare(
    policies: str = typer.Option(
        "all", help="Comma-separated registered policies (rule_v1, rule_v2, static, hpa, ppo, fa2, "
        "gslice, inss, ddpg, an installed one) or module:Class references, or all: the paper's "
        "comparison (ppo only when --models holds chatbot.zip, imgcls.zip and tts.zip)."
    ),
    load: list[str] = typer.Option(["5.1", "5.3"], "--table", "--load",
                                   help="Table whose load and units to use (repeatable); --load "
                                   "is its older name (elsewhere --load is a multiplier)."),
    traces: Path = TracesOpt,
    trace: list[str] = TraceOpt,
    trace_time_unit: str | None = TraceTimeUnitOpt,
    trace_rate_unit: str | None = TraceRateUnitOpt,
    service: list[str] = typer.Option(
        ["all"], help="Services compared, sharing the GPUs (repeatable or comma-separated): any "
        "registered one or one of --profiles; all: the paper's three. A service the table does not "
        "list takes ratio 1; fa2, gslice, inss and ddpg need its profile's gpu: curve. inss and ddpg, "
        "asked for some of the services their model plans, run the others beside them (their "
        "partners) and report only those asked."),
    models: Path = typer.Option(Path("models"), help="Directory with ddpg.zip, inss.zip (and PPO's)."),
    profiles: Path = typer.Option(None, "--profiles", help="Profile file merged over the registry's "
                                  "(gpu curves; services of your own)."),
    pipeline: str = typer.Option(
        None, help="A chain under one SLA, e.g. 'imgcls,tts:3000' (ms): the simulator routes each "
        "request imgcls completes to tts (tts ignores its own trace), every policy is measured end to "
        "end, and fa2 plans the chain with its DP."),
    plan_chain: bool = typer.Option(True, "--plan-chain/--no-plan-chain",
                                    help="fa2 with --pipeline: split the chain's SLA by its DP, or "
                                    "plan each service alone under its own SLO (same routing)."),
    layout: Path = typer.Option(None, help="GPU layout file: GPUs and each service's starting replicas, "
                                "share_pct, batch, gpus (overrides the table's GPU count)."),
    interference: bool = typer.Option(True, "--interference/--no-interference",
                                      help="InSS's interference term between instances on one GPU."),
    steps: int = typer.Option(None, help=f"Stop after this many {paper.STEP_SECONDS:g} s steps "
                              "(default: the whole day)."),
    scale: float = typer.Option(1.0, help="Multiply the table's ratios (e.g. 4: saturate the GPUs)."),
    seed: int = typer.Option(0, help="Simulation seed."),
    out: Path = typer.Option(None, help="Report directory (default runs/<UTC time>-compare)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per policy and load."),
) -> None:
    """Every policy on the GPU simulator on the test day: SLO violation rate, GPU share used,
    throughput, reward, decision time per step and the share bound; writes a report with the share
    used over time and a Pareto plot.

    Example: testbed sim compare --table 5.1 --policies fa2,rule_v2,ddpg
    Example: testbed sim compare --service imgcls --policies inss,rule_v2
    Example: testbed sim compare --service mysvc --profiles mysvc.yaml --trace mysvc=day.txt
    """
    import time as _time

    # the GPU simulator, the policies and the report (matplotlib): loaded only for this command
    from testbed.report.compare import write_compare_report
    from testbed.scaler.fa2 import Pipeline
    from testbed.train.compare import (
        TABLE_GPUS,
        LoadChoice,
        RunSettings,
        policy_names,
        prepare_comparison,
        report_note,
        run_comparison,
    )
    from testbed.train.partners import check_partners, joint_runs, partner_services

    known = known_profiles(profiles)
    services = chosen_services(service, known)
    names = policy_names(policies, models, services)
    joint = joint_runs(names, models, services)  # a joint planner runs beside its partners
    check_partners(joint, services, known, profiles)
    partners = partner_services(joint.values())
    note_left_out(known, [*services, *partners], profiles)
    if scale <= 0:
        raise ConfigError([ConfigProblem("--scale", None, "scale", f"must be > 0, got {scale:g}")])
    initial, layout_gpus = (layout_targets(layout, services) if layout is not None
                            else (None, None))
    for key in load:
        if key not in TABLE_GPUS:
            raise ConfigError([ConfigProblem("--table", None, "table",
                                             f"unknown {key!r}; use 5.1, 5.2 or 5.3")])
    pipes = [parse_pipeline(pipeline, Pipeline, services)] if pipeline else []
    every = chosen_traces(trace, traces, [*services, *partners], trace_time_unit, trace_rate_unit,
                          why={p: next(r.why(services) for r in joint.values() if p in r.partners)
                               for p in partners})
    tr = every.of(services)  # what the table's title names: the compared services' traces
    comparison = prepare_comparison(  # everything is checked before anything runs
        names, LoadChoice(tables=tuple(load), scale=scale, layout_gpus=layout_gpus,
                          trace_label="" if tr.paper else tr.label()),
        every.traces, models=models, services=services, profiles=known, profiles_path=profiles,
        settings=RunSettings(seed=seed, interference=interference, max_steps=steps, initial=initial,
                             pipelines=tuple(pipes), plan_chain=plan_chain))
    for run in joint.values():  # on stderr: --json output stays clean
        err_console.print(f"note: {run.note(services, every.traces)}", highlight=False, markup=False)
    started = _time.perf_counter()
    rows = run_comparison(comparison, stage=console.status,
                          on_result=lambda name, r: _print_compare_run(name, r, as_json))
    elapsed = _time.perf_counter() - started
    out = out or stamped("compare")
    write_compare_report(rows, out, report_note(comparison, elapsed, len(rows)))
    if not as_json:
        _print_compare_tables(rows, bool(pipes), elapsed, out)


def _print_compare_run(name: str, r: PolicyResult, as_json: bool) -> None:
    """One run of `sim compare` as it ends: its JSON object, or a line and one per chain."""
    if as_json:
        typer.echo(json.dumps(r.as_json()))
        return
    console.print(f"  {r.load} {name}: SLO {r.slo_violation_rate:.4f}, "
                  f"share {r.share_units:.2f} units, reward {r.reward:.4f}"
                  f" ({r.run_seconds:.1f} s)")
    for c in r.chains:
        console.print(f"    chain {c['pipeline']} (SLA {c['sla_ms']:g} ms): "
                      f"violations {c['violation_rate']:.4f} ({c['late']} late, "
                      f"{c['dropped']} dropped of {c['requests']}), end to end mean "
                      f"{c['mean_e2e_ms']:.0f} ms, p99 {c['p99_e2e_ms']:.0f} ms, "
                      f"{c['on_time_rps']:.2f} req/s in SLA")


def _print_compare_tables(rows: list[dict], chains: bool, elapsed: float, out: Path) -> None:
    """The report's tables, drawn for the terminal, and where the report is."""
    from rich.markdown import Markdown  # the report's tables, drawn for the terminal

    from testbed.report.compare import chain_table, markdown_table  # matplotlib: not for `--help`

    console.print(Markdown(markdown_table(rows)))
    if chains:
        console.print(Markdown(chain_table(rows)))
    console.print(f"{len(rows)} runs in {elapsed:.0f} s; report in {out}/compare.md")
