"""`testbed reproduce`: the dissertation's Figs 5.7/5.8 and Tables 5.1-5.4 in one command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from testbed.cli import TracesOpt, app, console, err_console
from testbed.cli.scenario import VERDICT_STYLE
from testbed.cli.web import WebOpt
from testbed.errors import TestbedError


@app.command("reproduce")
def reproduce_cmd(
    artefacts: Annotated[list[str] | None, typer.Argument(
        help="fig5.7 fig5.8 table5.1 table5.2 table5.3 table5.4 (default: all).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="CI size: slicing-ci, 2-minute Table 5.4 "
                                        "window after a 2-minute warm-up, Table 5.3 without the "
                                        "oracle bound.")] = False,
    out: Annotated[Path | None, typer.Option(help="Report folder (default runs/<time>-reproduce)."
                                             )] = None,
    traces: Path = TracesOpt,
    models: Annotated[Path, typer.Option(help="chatbot.zip, imgcls.zip, tts.zip from `testbed "
                                         "train`.")] = Path("models"),
    rule_only: Annotated[bool, typer.Option("--rule-only", help="Leave the DRL columns out (no "
                                            "models needed).")] = False,
    t54_duration: Annotated[float | None, typer.Option(help="Table 5.4 window in seconds.")] = None,
    t54_repetitions: Annotated[int | None, typer.Option(help="Table 5.4 repetitions.")] = None,
    t54_start: Annotated[str | None, typer.Option(help="Table 5.4 window start, HH:MM of the test "
                                                  "day (default 13:30).")] = None,
    t54_time_scale: Annotated[str, typer.Option(
        help="Table 5.4's time scale: the window runs this many times faster, the replicas "
        "sleeping their profile's time instead of decoding (the whole day: --t54-start 00:00 "
        "--t54-duration 86400 --t54-time-scale 16, which 2 cores hold; bench/time_scale.py "
        "measures it); auto: the highest this machine holds now, measured by a probe at the "
        "window's busiest second (up to 32). A segment that falls behind runs again, with the "
        "rest, one step lower.")] = "1",
    t54_measure: Annotated[str, typer.Option(
        help="How Table 5.4's scaler and reward read each period: drafas, as the dissertation's "
        "testbed did (its Prometheus: sidecar in-flight at each scrape over Running pods, "
        "increase() of the counters; docs/table-5.4.md), or harness, the harness's own "
        "integrated reading.")] = "drafas",
    t54_rule: Annotated[str, typer.Option(
        help="The policy in the paper's rule-based column: rule_v2, the dissertation's "
        "(Section 4.4.2), or rule_v1, what its published testbed code runs (tu-nv/drafas "
        "drl/drl.py:225).")] = "rule_v2",
    no_progress: Annotated[bool, typer.Option("--no-progress", "--quiet", help="Plain lines instead of the "
                                              "live view.")] = False,
    resume: Annotated[Path | None, typer.Option(
        "--resume", help="Continue an interrupted reproduce from its folder (RUN_DIR.partial, or "
        "RUN_DIR): after its finished artefacts and Table 5.4's finished segments, with its "
        "options.", metavar="RUN_DIR")] = None,
    allow_undecided: Annotated[bool, typer.Option(
        "--allow-undecided", help="Exploration: an UNDECIDED artefact does not fail (exit 0 "
        "instead of 2).")] = False,
    web: Annotated[str | None, WebOpt] = None,
) -> None:
    """Run the dissertation's artefacts and write one report (HTML + Markdown) with each beside
    the paper, a stated tolerance and PASS, FAIL, UNDECIDED (the data cannot decide it, with the
    size that decides it) or NOT RUN (this size is not judged against a day-long figure, listed
    apart); exits 1 when an artefact FAILs, 2 when one is UNDECIDED, else 0.

    Example: [bold]testbed reproduce --quick[/]   or   [bold]testbed reproduce fig5.7 table5.1[/]
    Live page of each scenario run in turn: [bold]testbed reproduce --quick --web[/]
    """
    # the whole stack (simulator, testbed, report): loaded only when this command runs
    from testbed.reproduce.artefacts import select
    from testbed.reproduce.run import Options, default_out, reproduce
    from testbed.traces import traces_folder

    chosen = select(artefacts or [])
    if t54_duration is not None and t54_duration <= 0:
        raise typer.BadParameter("--t54-duration must be positive")
    if t54_repetitions is not None and t54_repetitions < 1:
        raise typer.BadParameter("--t54-repetitions must be at least 1")
    if t54_time_scale != "auto":
        try:
            t54_time_scale = float(t54_time_scale)  # type: ignore[assignment]
        except ValueError:
            raise typer.BadParameter("--t54-time-scale must be a number or auto") from None
        if not 0 < t54_time_scale <= 1000:  # type: ignore[operator]
            raise typer.BadParameter("--t54-time-scale must be in (0, 1000]")
    if t54_measure not in ("harness", "drafas"):
        raise typer.BadParameter("--t54-measure must be drafas or harness")
    if t54_rule not in ("rule_v1", "rule_v2"):
        raise typer.BadParameter("--t54-rule must be rule_v1 or rule_v2")
    start_s = None if t54_start is None else _clock(t54_start)
    shaping = dict(quick=quick, rule_only=rule_only, t54_duration_s=t54_duration,
                   t54_repetitions=t54_repetitions, t54_start_s=start_s,
                   t54_time_scale=t54_time_scale, t54_measure=t54_measure, t54_rule=t54_rule,
                   traces_dir=traces, models_dir=models)
    if resume is not None:
        from testbed.reproduce.run import resumed

        given = [_FLAGS[k] for k, v in shaping.items() if v != _DEFAULTS[k]] + (["--out"] if out else [])
        if given:
            raise typer.BadParameter(f"--resume takes the interrupted run's options: leave out "
                                     f"{', '.join(given)}")
        out, shaping = resumed(resume)
    shaping["traces_dir"] = traces_folder(shaping["traces_dir"])  # none given: the shipped ones
    out = out or default_out(quick)
    partial = out.with_name(out.name + ".partial")
    live = None
    if web is not None:  # the port bound before anything runs: one in use stops here
        from testbed.cli.web import LiveServer, bind_web

        live = LiveServer(bind_web(web), reproduce=out)
    try:
        result = reproduce(chosen, Options(
            out=out, **shaping,
            progress=lambda line: console.print(line, highlight=False, markup=False),
            show_runs=not no_progress))
    except (TestbedError, KeyboardInterrupt):
        if (partial / "done").is_dir():  # work was kept: say how to go on from it
            err_console.print(f"to resume after the finished artefacts and Table 5.4's finished "
                              f"segments: testbed reproduce {' '.join(a.name for a in chosen)} "
                              f"--resume {partial} (or the same command with --out {out})",
                              highlight=False, markup=False)
        raise
    finally:
        if live is not None:
            live.stop()
    table = Table("artefact", "result", "summary", "min", title="Reproduction")
    for v in result.verdicts:
        summary = v.summary + (f"; decided by: {v.decided_by}" if v.decided_by else "")
        table.add_row(v.artefact, VERDICT_STYLE[v.verdict], escape(summary),
                      f"{v.seconds / 60:.1f}")
    console.print(table)
    undecided = [v.artefact for v in result.verdicts if v.verdict == "UNDECIDED"]
    failed = [v.artefact for v in result.verdicts if v.verdict == "FAIL"]
    if failed or undecided:
        console.print("[red]FAIL:[/] " + (", ".join(failed) or "none") +
                      "   [bold magenta]UNDECIDED:[/] " + (", ".join(undecided) or "none"))
    for line in result.not_run():
        console.print(f"[dim]NOT RUN at this size:[/] {escape(line)}")
    console.print(f"report: {result.out / 'report.html'} (and report.md), "
                  f"{result.seconds / 60:.1f} min")
    code = result.exit_code(allow_undecided)
    if code:
        raise typer.Exit(code)


# the options that shape a run, as given when none is (--resume takes the run's own)
_DEFAULTS = {"quick": False, "rule_only": False, "t54_duration_s": None, "t54_repetitions": None,
             "t54_start_s": None, "t54_time_scale": 1.0, "t54_measure": "drafas",
             "t54_rule": "rule_v2", "traces_dir": None, "models_dir": Path("models")}
_FLAGS = {"quick": "--quick", "rule_only": "--rule-only", "t54_duration_s": "--t54-duration",
          "t54_repetitions": "--t54-repetitions", "t54_start_s": "--t54-start",
          "t54_time_scale": "--t54-time-scale", "t54_measure": "--t54-measure",
          "t54_rule": "--t54-rule", "traces_dir": "--traces", "models_dir": "--models"}


def _clock(text: str) -> int:
    """'13:30' -> seconds into the day; anything else is a usage error."""
    hh, sep, mm = text.partition(":")
    if not (sep and hh.isdigit() and mm.isdigit() and int(hh) < 24 and int(mm) < 60):
        raise typer.BadParameter(f"--t54-start must be HH:MM within a day, got {text!r}")
    return int(hh) * 3600 + int(mm) * 60
