"""`testbed judge RUN_DIR`: a run judged again from its record (results.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from testbed.cli import app, console
from testbed.errors import ConfigError


@app.command("judge")
def judge(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (its results.json).")],
    scenario: Annotated[Path | None, typer.Option(
        "--scenario", help="Judge with this scenario file's expect: lines (checked at load as "
        "for a run) instead of the run's own.")] = None,
    allow_undecided: Annotated[bool, typer.Option(
        "--allow-undecided", help="Exploration: an UNDECIDED check does not fail (exit 0 "
        "instead of 2).")] = False,
) -> None:
    """Judge a run again from its results.json rows, without running it: the run's own expect:
    lines, or those of --scenario FILE (changed lines, or a run someone shared). Prints the
    expectations table and exits as `testbed run` does: 0 PASS, 1 FAIL, 2 UNDECIDED.

    Example: [bold]testbed judge runs/20261122T050000Z-slicing-ci --scenario scenarios/slicing-ci.yaml[/]
    """
    from testbed.cli.scenario import exit_for, print_outcomes, run_banner
    from testbed.judge.outcome import evaluate_all
    from testbed.judge.syntax import ExpectSyntaxError
    from testbed.judge.verdict import run_verdict
    from testbed.scenario.results import read_record

    record = read_record(run_dir)
    texts = _expect_lines(run_dir, record, scenario)
    try:
        outcomes = evaluate_all(texts, record["rows"])
    except ExpectSyntaxError as exc:
        raise ConfigError(f"{run_dir}: an expect: line cannot be read: {exc}") from None
    print_outcomes(outcomes)
    verdict = run_verdict(outcomes, record["rows"], interrupted=bool(record.get("interrupted")),
                          allow_undecided=allow_undecided)
    console.print(run_banner(verdict, outcomes))
    if verdict.interrupted:
        console.print("[yellow]the run was interrupted: its rows cover what was collected[/]")
    exit_for(verdict)


def _expect_lines(run_dir: Path, record: dict[str, Any], scenario: Path | None) -> list[str]:
    """--scenario's lines (loaded, with the load-time checks and the power plan), else the run's
    manifest's, else those results.json judged."""
    if scenario is not None:
        from testbed.scenario.load import load_scenario

        return list(load_scenario(scenario).scenario.expect)
    manifest = run_dir / "manifest.json"
    if manifest.is_file():
        try:
            lines = json.loads(manifest.read_text()).get("scenario", {}).get("expect")
        except (json.JSONDecodeError, AttributeError):
            lines = None
        if isinstance(lines, list):
            return [str(x) for x in lines]
    return [str(o.get("text")) for o in record.get("expect", []) if isinstance(o, dict)]
