"""Scenario commands: run a scenario end to end, regenerate a report from a run directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from testbed.cli import app, console
from testbed.cli.checks import like_field, writable_dir
from testbed.errors import StateError

if TYPE_CHECKING:
    from testbed.scenario.expect import Outcome
    from testbed.scenario.lab import LabOptions
    from testbed.scenario.load import LoadedScenario
    from testbed.scenario.runner import RunResult

MANIFEST_KEYS = ("scenario", "testbed", "source", "profile", "created", "host")


def read_manifest(path: Path) -> dict:
    """A run's manifest.json as a dict with the keys a report and a re-run need; anything else
    (missing, empty, not JSON, truncated) is one StateError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StateError(f"{path}: cannot read the manifest ({getattr(exc, 'strerror', None) or exc})"
                         ) from None
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        what = "empty" if not text.strip() else f"not JSON ({exc})"
        raise StateError(f"{path}: not a run manifest: {what}") from None
    if not isinstance(manifest, dict):
        raise StateError(f"{path}: not a run manifest: a JSON object is expected")
    missing = [k for k in MANIFEST_KEYS if k not in manifest]
    if missing:
        raise StateError(f"{path}: not a run manifest: missing {', '.join(missing)}")
    for key in ("scenario", "testbed", "host"):
        if not isinstance(manifest[key], dict):
            raise StateError(f"{path}: not a run manifest: {key} must be an object")
    return manifest


def _from_manifest(path: Path) -> LoadedScenario:
    # pydantic models and the scenario layer: loaded only by the commands that read a manifest
    from testbed.config import TestbedSpec
    from testbed.config.secrets import unredact_scenario, unredact_testbed
    from testbed.config.yamlfile import LocatedYaml, validate
    from testbed.scenario.load import LoadedScenario
    from testbed.scenario.spec import Scenario

    manifest = read_manifest(path)
    # masked secrets come back as defaults: keys derive from the default seed
    doc = LocatedYaml(unredact_scenario(manifest["scenario"]), {}, f"{path}: scenario")
    scn = validate(Scenario, doc)
    testbed_doc = LocatedYaml(unredact_testbed(manifest["testbed"]), {}, f"{path}: testbed")
    testbed = validate(TestbedSpec, testbed_doc)
    base = Path(str(manifest.get("base_dir") or Path(str(manifest["source"])).parent))
    return LoadedScenario(scn, testbed, doc, base)


@app.command("run")
def run(
    scenario: Annotated[Path | None, typer.Argument(help="Scenario file (YAML).")] = None,
    profile: Annotated[str, typer.Option(help="local or lab.")] = "local",
    out: Annotated[Path, typer.Option(help="Parent folder of the run directory.")] = Path("runs"),
    time_scale: Annotated[float | None, typer.Option(help="Override the scenario's time-scale "
                                                     "factor.")] = None,
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
) -> None:
    """Run a scenario end to end into a run directory and write its report; exits 1 when an
    `expect:` check FAILs or reads a cell that lost requests or got none (UNDECIDED); a check
    this size cannot decide is UNDECIDED with what would decide it, and does not fail the run.

    Example: [bold]testbed run scenarios/smoke.yaml[/]   or   [bold]testbed run --from runs/X/manifest.json[/]
    Lab: [bold]testbed run --profile lab -i inventory.yml scenarios/slicing.yaml [--check][/]
    """
    # the scenario layer (numpy, pydantic): loaded only for `run`
    from testbed.scenario.runner import RunOptions, run_scenario
    from testbed.scenario.spec import Scenario

    # overrides get the file fields' rules and messages; the output folder must be writable:
    # all before a testbed is built
    like_field("--time-scale", Scenario, "time_scale", time_scale)
    like_field("--duration", Scenario, "duration_s", duration)
    like_field("--repetitions", Scenario, "repetitions", repetitions)
    like_field("--metrics", Scenario, "metrics", metrics)
    loaded = _scenario_to_run(scenario, from_manifest)
    writable_dir("--out", out)
    lab = _lab_options(profile, inventory, kubeconfig=kubeconfig, prometheus=prometheus, check=check)
    result = run_scenario(loaded, RunOptions(out_root=out, profile=profile, time_scale=time_scale,
                                             duration_s=duration, repetitions=repetitions,
                                             metrics=metrics, progress=not no_progress and not check,
                                             console=console, lab=lab))
    if check:
        _print_check_run(result)
    else:
        _report_run(result)


def _scenario_to_run(scenario: Path | None, from_manifest: Path | None) -> LoadedScenario:
    """The scenario of `--from MANIFEST` if given, else of the SCENARIO file."""
    from testbed.scenario.load import load_scenario

    if from_manifest is not None:
        return _from_manifest(from_manifest)
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
    """What a `--check` run leaves: where its (record-less) run directory is, and its problems."""
    console.print(f"check mode: nothing was changed on the lab; run directory (no "
                  f"records): {result.run_dir}")
    for p in result.problems:
        console.print(f"[yellow]problem:[/] {p}")


def _report_run(result: RunResult) -> None:
    """Write the run's report, print its cells, checks and verdict, and exit 130 when it was
    interrupted, 1 when it fails."""
    from testbed.report import write_report  # matplotlib: loaded only once a run has results

    write_report(result.run_dir)
    print_cells(result.rows)
    print_outcomes(result.outcomes)
    for p in result.problems:
        console.print(f"[yellow]problem:[/] {p}")
    console.print(f"run directory: {result.run_dir}\nreport: {result.run_dir / 'report.html'}")
    console.print(run_banner(result.outcomes, interrupted=result.interrupted))
    if result.interrupted:
        console.print("[yellow]interrupted: the report covers what was collected[/]")
        raise typer.Exit(130)
    # FAIL fails the run, and so does UNDECIDED for a lost cell or one without requests; a check
    # the run is too small to decide does not
    if any(o.fails_run for o in result.outcomes):
        raise typer.Exit(1)


VERDICT_STYLE = {"PASS": "[green]PASS[/]", "FAIL": "[red]FAIL[/]", "UNDECIDED": "[yellow]UNDECIDED[/]"}


def print_cells(rows: list[dict[str, Any]]) -> None:
    """One line per cell and service (and per slice's iperf3 traffic): what the run measured,
    before the checks judge it."""
    if not rows:
        return
    params = [k for k in rows[0] if k not in _ROW_FIELDS]

    def num(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)
    table = Table(*params, "rep", "service / slice", "requests", "errors", "SLO viol.", "mean ms",
                  "p99 ms", "replicas", "iperf3 Mbit/s", "status", title="Cells")
    for r in rows:
        cells = [escape(str(r.get(k, ""))) for k in params] + [str(r.get("rep", 0))]
        if r.get("service"):
            cells += [escape(str(r["service"])), str(r.get("requests", 0)), str(r.get("errors", 0)),
                      num(r.get("slo_violation_rate"), ".1%"), num(r.get("mean_latency_ms"), ".0f"),
                      num(r.get("p99_latency_ms"), ".0f"), num(r.get("mean_replicas"), ".1f"), ""]
        else:
            cells += [f"slice {escape(str(r.get('slice', '')))} ({r.get('direction', '')})",
                      "", "", "", "", "", "", num(r.get("iperf_goodput_mbit"), ".1f")]
        status = str(r.get("status", "ok"))
        table.add_row(*cells, "ok" if status == "ok" else f"[red]{escape(status)}[/]")
    console.print(table)


# what a results row holds besides the matrix's parameters
_ROW_FIELDS = {"cell", "rep", "status", "service", "slice", "direction", "iperf_goodput_mbit",
               "iperf_error", "requests", "errors", "error_kinds", "violations",
               "slo_violation_rate", "mean_latency_ms", "p50_latency_ms", "p99_latency_ms",
               "mean_sched_latency_ms", "throughput_rps", "bytes_up", "bytes_down",
               "planned_requests", "lost_requests", "mean_replicas", "reward", "decisions",
               "replica_probes", "config_mismatches", "target_mismatches", "mean_share_pct",
               "mean_batch", "mean_stretch", "max_stretch", "warmup_requests"}


def run_banner(outcomes: list[Outcome], *, interrupted: bool) -> str:
    """The run's verdict in one line: PASS, FAIL or PASS with checks undecided at this size."""
    counts = {v: sum(o.verdict == v for o in outcomes) for v in ("PASS", "FAIL", "UNDECIDED")}
    detail = ", ".join(f"{n} {v.lower()}" for v, n in counts.items() if n) or "no checks"
    if interrupted:
        return f"[bold yellow]INTERRUPTED[/] ({detail})"
    if any(o.fails_run for o in outcomes):
        return f"[bold red]FAIL[/] ({detail})"
    return f"[bold green]PASS[/] ({detail}" + (
        "; undecided at this size: see the table" if counts["UNDECIDED"] else "") + ")"


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
