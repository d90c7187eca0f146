"""Scenario commands: run a scenario end to end, regenerate a report from a run directory."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from testbed.cli import app, console, err_console, show_traces
from testbed.cli.checks import bad as checks_bad
from testbed.cli.checks import like_field, writable_dir
from testbed.cli.manifest import read_manifest, scenario_from_manifest
from testbed.cli.web import WebOpt
from testbed.errors import StateError
from testbed.paths import RUNS_DIR

if TYPE_CHECKING:
    from testbed.judge.outcome import Outcome
    from testbed.judge.verdict import Verdict
    from testbed.scenario.lab import LabOptions
    from testbed.scenario.load import LoadedScenario
    from testbed.scenario.runner import RunOptions, RunResult

@app.command("run")
def run(
    scenario: Annotated[Path | None, typer.Argument(help="Scenario file (YAML).")] = None,
    profile: Annotated[str, typer.Option(help="local or lab.")] = "local",
    out: Annotated[Path, typer.Option(help="Parent folder of the run directory.")] = RUNS_DIR,
    time_scale: Annotated[str | None, typer.Option(
        help="Override the scenario's time-scale factor: a number, or auto (the highest this "
        "machine holds now, measured by a probe at the scenario's busiest second before the "
        "run, up to 32 with sleeping replicas; printed).")] = None,
    replica_work: Annotated[str | None, typer.Option(
        "--replica-work", help="Local profile: real (the replicas decode and synthesise) or sleep "
        "(they only spend their profile's time: for a --time-scale the work cannot keep up "
        "with). Default: the scenario's `replica_work:`, else real.")] = None,
    duration: Annotated[float | None, typer.Option(help="Override the seconds per cell (a "
                                                   "shorter window).")] = None,
    repetitions: Annotated[int | None, typer.Option(help="Override repetitions.")] = None,
    from_manifest: Annotated[Path | None, typer.Option("--from", help="Repeat a run from its "
                                                       "manifest.json.")] = None,
    no_progress: Annotated[bool, typer.Option("--no-progress", "--quiet", help="Plain lines instead of "
                                              "the live view.")] = False,
    inventory: Annotated[Path | None, typer.Option("-i", "--inventory", help="Lab profile: the "
                                                   "Ansible inventory of `testbed up`.")] = None,
    check: Annotated[bool, typer.Option("--check", help="Lab profile: print every action the "
                                        "run would take, in order, without a lab.")] = False,
    kubeconfig: Annotated[Path | None, typer.Option(help="Lab profile: default $KUBECONFIG, "
                                                    "else runs/*-lab-up/kubeconfig.")] = None,
    prometheus: Annotated[str | None, typer.Option(help="Lab profile: Prometheus URL (default "
                                                   "http://<cluster_server>:30090).")] = None,
    metrics: Annotated[str | None, typer.Option(
        "--metrics", help="Local profile: where the scaler and samples read metrics: in-process "
        "(the load balancer) or prometheus (a Prometheus server of the run's own, queried as "
        "the lab's; each cell then prints both sources side by side). Default: the scenario's "
        "`metrics:`, else in-process.")] = None,
    jobs: Annotated[int, typer.Option(
        "--jobs", metavar="N", help="engine: sim: run N cells at once on this machine's cores "
        "(0: every core; results as with 1). The testbed engine runs one cell at a time.")] = 1,
    dask: Annotated[str | None, typer.Option(
        "--dask", metavar="tcp://HOST:PORT", help="engine: sim: run the cells on the workers of "
        "this Dask scheduler (pip install \"dask[distributed]\"); the workers need the "
        "scenario's traces and models at the same paths.")] = None,
    allow_undecided: Annotated[bool, typer.Option(
        "--allow-undecided", help="Exploration: an UNDECIDED check does not fail the run (exit 0 "
        "instead of 2).")] = False,
    plan: Annotated[bool, typer.Option(
        "--plan", help="Print each expect: check's planned requests per cell and the effect it "
        "can detect (alpha 0.05, power 0.95), and run nothing.")] = False,
    web: Annotated[str | None, WebOpt] = None,
) -> None:
    """Run a scenario end to end into a run directory and write its report; exits 0 when every
    `expect:` check PASSes, 1 when one FAILs or reads a cell that lost requests or got none, 2
    when one is UNDECIDED (the data cannot decide it: never a pass; --allow-undecided for
    exploration). Checks this size cannot decide are refused at load (--plan shows each one's size).

    Example: [bold]testbed run scenarios/smoke.yaml[/]   or   [bold]testbed run --from runs/X/manifest.json[/]
    Live page: [bold]testbed run scenarios/smoke.yaml --web[/]   or   [bold]--web 8080[/]
    Lab: [bold]testbed run --profile lab -i inventory.yml scenarios/slicing.yaml [--check][/]
    Parallel (engine: sim): [bold]testbed run scenarios/sim-tables.yaml --jobs 0[/]   or   [bold]--dask tcp://HOST:8786[/]
    """
    # the scenario layer (numpy, pydantic): loaded only for `run`
    from testbed.scenario.runner import RunOptions, run_scenario
    from testbed.scenario.spec import Scenario

    # overrides get the file fields' rules and messages; the output folder must be writable:
    # all before a testbed is built
    auto = time_scale == "auto"
    scale = None if auto or time_scale is None else like_field(
        "--time-scale", Scenario, "time_scale", _number("--time-scale", time_scale))
    like_field("--replica-work", Scenario, "replica_work", replica_work)
    like_field("--duration", Scenario, "duration_s", duration)
    like_field("--repetitions", Scenario, "repetitions", repetitions)
    like_field("--metrics", Scenario, "metrics", metrics)
    loaded = _scenario_to_run(scenario, from_manifest)
    _show_traces(loaded)
    if auto and not plan:
        from testbed.scenario.pace import choose_time_scale

        scn = loaded.scenario
        if replica_work is not None:
            scn = scn.model_copy(update={"replica_work": replica_work})
        scale, line = choose_time_scale(scn, loaded.base_dir)
        err_console.print(line, highlight=False, markup=False)
    if plan:

        print_plan(loaded, duration_s=duration, repetitions=repetitions)
        return
    writable_dir("--out", out)
    lab = _lab_options(profile, inventory, kubeconfig=kubeconfig, prometheus=prometheus, check=check)
    if web is not None and check:
        raise typer.BadParameter("--web shows a run as it goes: --check runs none")
    options = RunOptions(out_root=out, profile=profile, time_scale=scale,
                         replica_work=replica_work, duration_s=duration, repetitions=repetitions,
                         metrics=metrics, progress=not no_progress and not check,
                         console=console, lab=lab, jobs=jobs, dask=dask)
    with _live_page(web, out, loaded.scenario.name, options):
        result = run_scenario(loaded, options)
        if check:
            _print_check_run(result)
            return
        rerun = ["testbed", "run", *(["--from", str(from_manifest)] if from_manifest is not None
                                     else [str(scenario)])]
        _report_run(result, allow_undecided=allow_undecided, rerun=rerun)


def _number(option: str, text: str) -> float:
    """A number option that also takes a word (`--time-scale auto`): its value, or one error."""
    try:
        return float(text)
    except ValueError:
        raise checks_bad(option, f"a number or auto, not {text!r}") from None


@contextlib.contextmanager
def _live_page(web: str | None, out: Path, name: str, options: RunOptions) -> Iterator[None]:
    """With --web: the page's port bound (a port in use stops here, before the run), the run's
    directory named in `options` for it to watch, its server beside the run, stopped at the end
    (a run directory the run never began is removed)."""
    if web is None:
        yield
        return
    from testbed.cli.web import LiveServer, bind_web, watch_hint
    from testbed.paths import new_run_dir

    sock = bind_web(web)
    options.run_dir = run_dir = new_run_dir(out, name)
    try:
        with LiveServer(sock, run_dir=run_dir):
            yield
    finally:
        if not (run_dir / "manifest.json").exists():
            with contextlib.suppress(OSError):
                run_dir.rmdir()
        else:
            console.print(escape(watch_hint(run_dir)), highlight=False, soft_wrap=True)


def _show_traces(loaded: LoadedScenario) -> None:
    """Each client trace of the scenario, as it loaded (`show_traces`)."""
    from testbed.scenario.spec import read_trace, trace_dir

    scn = loaded.scenario
    paths = sorted({trace_dir(scn, loaded.base_dir) / c.trace for c in scn.clients if c.trace})
    show_traces(read_trace(scn, p) for p in paths)


def _scenario_to_run(scenario: Path | None, from_manifest: Path | None) -> LoadedScenario:
    """The scenario of `--from MANIFEST` if given, else of the SCENARIO file."""
    from testbed.scenario.load import load_scenario

    if from_manifest is not None:
        return scenario_from_manifest(from_manifest)
    if scenario is not None:
        return load_scenario(scenario)
    raise typer.BadParameter("give a scenario file or --from RUN_DIR/manifest.json")


def _lab_options(profile: str, inventory: Path | None, *, kubeconfig: Path | None,
                 prometheus: str | None, check: bool) -> LabOptions | None:
    """The lab profile's options (its actions printed as they happen), None for the local one;
    -i and --check outside the lab profile are an error."""
    if profile != "lab":
        if check or inventory is not None:
            raise typer.BadParameter("-i and --check belong to the lab profile (--profile lab)")
        return None
    if inventory is None:
        raise typer.BadParameter("the lab profile needs -i INVENTORY (the inventory of "
                                 "`testbed up --profile lab`)")
    from testbed.scenario.lab import LabOptions

    return LabOptions(inventory, kubeconfig=kubeconfig, prometheus=prometheus, check=check,
                      emit=lambda line: console.print(escape(line), highlight=False, soft_wrap=True))


def _print_check_run(result: RunResult) -> None:
    """What a `--check` run leaves: where its plan directory is, and its problems."""
    console.print(f"check mode: a plan, nothing was changed on the lab or measured; plan "
                  f"directory (plan.txt, plan.json, the manifests; no results): {result.run_dir}")
    for p in result.problems:
        console.print(f"[yellow]problem:[/] {p}")


def _report_run(result: RunResult, *, allow_undecided: bool = False, rerun: list[str] | None = None
                ) -> None:
    """Write the run's report, print its cells, checks and verdict, and exit 130 when it was
    interrupted, else as `exit_for` (allow_undecided: an UNDECIDED check does not fail it). When
    a cell failed because the machine fell behind, one line says the time scale it holds now,
    measured on the spot, and how to rerun at it (`rerun`: the run's command)."""
    from testbed.report import write_report  # matplotlib: loaded only once a run has results

    write_report(result.run_dir)
    print_cells(result.rows)
    print_outcomes(result.outcomes)
    for p in result.problems:
        console.print(f"[yellow]problem:[/] {p}")
    console.print(f"run directory: {result.run_dir}\nreport: {result.run_dir / 'report.html'}")
    if result.failed_cells and not result.interrupted:
        from testbed.scenario.pace import advice  # the probe's client and server: only when behind

        line = advice(result.run_dir, rerun or ["testbed", "run", "SCENARIO"])
        if line is not None:
            console.print(f"[yellow]{escape(line)}[/]", soft_wrap=True, highlight=False)
    verdict = result.verdict(allow_undecided)
    console.print(run_banner(verdict, result.outcomes))
    if result.interrupted:
        console.print("[yellow]interrupted: the report covers what was collected[/]")
    exit_for(verdict)


def exit_for(verdict: Verdict) -> None:
    """Exit as `testbed run` and `testbed judge` do: the verdict's exit code (130 interrupted, 1
    FAIL, 2 UNDECIDED), else return (exit 0).

    verdict: testbed.judge.verdict.run_verdict's."""
    if verdict.exit_code:
        raise typer.Exit(verdict.exit_code)


# UNDECIDED has its own word and colour: never green
VERDICT_STYLE = {"PASS": "[green]PASS[/]", "FAIL": "[red]FAIL[/]",
                 "UNDECIDED": "[bold magenta]UNDECIDED[/]", "NOT RUN": "[dim]NOT RUN[/]",
                 "MACHINE BEHIND": "[bold yellow]MACHINE BEHIND[/]"}


def print_cells(rows: list[dict[str, Any]]) -> None:
    """One line per cell and service (and per slice's iperf3 traffic, per routed pipeline): the
    cell's matrix parameters, then what the run measured, before the checks judge it. A figure
    no row has (requests on the simulator, iperf3 without cross-traffic) takes no column."""
    if not rows:
        return
    params = _cell_params(rows)
    figures = [(title, fmt) for title, fmt in _FIGURES
               if any(fmt(r) for r in rows)]
    what = "service" if all(r.get("service") for r in rows) else "service / slice"
    table = Table(*params, "rep", what, *(t for t, _ in figures), "status", title="Cells")
    for r in rows:
        status = str(r.get("status", "ok"))
        table.add_row(*(escape(_param(r.get(k))) for k in params), str(r.get("rep", 0)),
                      escape(_what(r)), *(fmt(r) for _, fmt in figures),
                      "ok" if status == "ok" else f"[red]{escape(status)}[/]")
    console.print(table)


def _cell_params(rows: list[dict[str, Any]]) -> list[str]:
    """The matrix's parameters, in the order the cells list them (`matrix_params` of each row;
    none for a run without a matrix)."""
    names: dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r.get("matrix_params", ())))
    return list(names)


def _param(v: Any) -> str:
    """A parameter's value as the cell's label writes it (on/off for yes/no)."""
    if isinstance(v, bool):
        return "on" if v else "off"
    return "" if v is None else str(v)


def _what(r: dict[str, Any]) -> str:
    if r.get("service"):
        return str(r["service"])
    if r.get("pipeline"):
        return f"pipeline {r['pipeline']}"
    return f"slice {r.get('slice', '')} ({r.get('direction', '')})"


def _num(key: str, spec: str) -> Any:
    def fmt(r: dict[str, Any]) -> str:
        v = r.get(key)
        if not isinstance(v, int | float) or isinstance(v, bool):
            return ""
        return format(v, spec)
    return fmt


def _either(*fmts: Any) -> Any:
    """The first figure a row has: a service's and a routed pipeline's under one column."""
    def fmt(r: dict[str, Any]) -> str:
        return next((s for s in (f(r) for f in fmts) if s), "")
    return fmt


def _iperf(r: dict[str, Any]) -> str:
    if r.get("iperf_error"):
        return "[red]error[/]"
    return _num("iperf_goodput_mbit", ".1f")(r)


# the figures of the cells table: (column, text of a row's figure, "" where the row has none)
_FIGURES = [
    ("requests", _num("requests", "d")),
    ("errors", _num("errors", "d")),
    ("SLO viol.", _either(_num("slo_violation_rate", ".1%"), _num("chain_violation_rate", ".1%"))),
    ("mean ms", _either(_num("mean_latency_ms", ".0f"), _num("mean_e2e_ms", ".0f"))),
    ("p99 ms", _either(_num("p99_latency_ms", ".0f"), _num("p99_e2e_ms", ".0f"))),
    ("replicas", _num("mean_replicas", ".1f")),
    ("reward", _num("reward", ".3f")),
    ("iperf3 Mbit/s", _iperf),
]


def run_banner(verdict: Verdict, outcomes: list[Outcome]) -> str:
    """The run's verdict in one line: PASS, FAIL (a check, or a failed cell), UNDECIDED (never
    green), NOT JUDGED (no checks), or with `allow_undecided` PASS marked as exploration.

    verdict: testbed.judge.verdict.run_verdict's; outcomes: the checks it judged."""
    counts = {v: sum(o.verdict == v and not (v == "UNDECIDED" and o.exploratory) for o in outcomes)
              for v in ("PASS", "FAIL", "UNDECIDED", "MACHINE BEHIND")}
    counts["UNDECIDED (exploratory)"] = sum(o.verdict == "UNDECIDED" and o.exploratory
                                            for o in outcomes)
    detail = ", ".join(f"{n} {v.lower()}" for v, n in counts.items() if n) or "no checks"
    if verdict.interrupted:
        return f"[bold yellow]INTERRUPTED[/] ({detail})"
    if verdict.failed_cells:
        detail += f"; failed cell(s): {', '.join(verdict.failed_cells)}"
    if verdict.verdict == "FAIL":
        return f"[bold red]FAIL[/] ({detail})"
    if verdict.verdict == "MACHINE BEHIND":
        return (f"[bold yellow]MACHINE BEHIND[/] ({detail}; cell(s) the machine fell behind in: "
                f"{', '.join(verdict.behind_cells) or 'none'}: their figures are the host's, not "
                "the product's; each cell's line says why, with the host's figures)")
    if verdict.verdict == "UNDECIDED":
        return f"[bold magenta]UNDECIDED[/] ({detail}; the data cannot decide them: see the table)"
    if verdict.allow_undecided and counts["UNDECIDED"]:  # exits 0, and still never green
        return (f"[bold magenta]UNDECIDED[/] ({detail}; allowed (--allow-undecided): "
                "exploration, not a pass)")
    if verdict.verdict == "NOT JUDGED":
        return f"[bold]NOT JUDGED[/] ({detail})"
    return f"[bold green]PASS[/] ({detail})"


def print_outcomes(outcomes: list[Outcome]) -> None:
    if not outcomes:
        return
    table = Table("expect", "result", "value", title="Expectations")
    for o in outcomes:
        table.add_row(escape(o.text), VERDICT_STYLE[o.verdict], escape(o.explain()))
    console.print(table)


@app.command("report")
def report(run_dir: Annotated[Path, typer.Argument(help="A run directory.")]) -> None:
    """Regenerate report.md and report.html from a run directory alone.

    Example: [bold]testbed report runs/20261122T050000Z-smoke[/]
    """
    from testbed.report import write_report  # matplotlib: loaded only for this command

    if not (run_dir / "manifest.json").is_file():
        raise StateError(f"{run_dir} is not a run directory (no manifest.json)")
    read_manifest(run_dir / "manifest.json")
    writable_dir("RUN_DIR", run_dir)
    md, page = write_report(run_dir)
    console.print(f"wrote {md} and {page}")


def print_plan(loaded: LoadedScenario, *, duration_s: float | None = None,
               repetitions: int | None = None) -> None:
    """`testbed run --plan`: each chance-tested check's planned requests per cell, the smallest
    effect it detects (alpha 0.05, power 0.95), the effect it states, and whether it is decided.

    loaded: the scenario; duration_s, repetitions: the run's overrides."""
    from testbed.judge.power import plan_table
    from testbed.scenario.matrix import expand
    from testbed.scenario.plan import plan_checks

    update: dict[str, Any] = {}
    if duration_s is not None:
        update["duration_s"] = duration_s
    if repetitions is not None:
        update["repetitions"] = repetitions
    scn = loaded.scenario.model_copy(update=update) if update else loaded.scenario
    plans = plan_checks(scn, expand(scn, loaded.testbed), loaded.base_dir)
    table = Table("expect", "requests/cell", "detects", "states", "at this size",
                  title=f"Power of {scn.name}'s checks ({scn.duration_s:g} s per cell)")
    for row in plan_table(plans):
        table.add_row(*(escape(c) for c in row))
    console.print(table)
    plain = len(scn.expect) - len(plans)
    if plain:
        console.print(f"{plain} check(s) are plain comparisons (no chance in their figures)")
