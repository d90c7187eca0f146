"""`testbed export`: a run's result rows or request records as CSV or JSON lines."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from testbed.cli import app, console, err_console


class Format(str, Enum):
    """The formats `testbed export` writes (testbed.report.export.FORMATS)."""

    csv = "csv"
    jsonl = "jsonl"


@app.command("export")
def export(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    out: Annotated[str, typer.Option("--out", "-o", help="File to write; - for standard "
                                     "output.")],
    fmt: Annotated[Format, typer.Option("--format", help="csv (a header, nested values as "
                                        "JSON) or jsonl (one JSON object a line).")] = Format.csv,
    requests: Annotated[bool, typer.Option("--requests", help="Every request record (with its "
                                           "cell, repetition, client and service) instead of the "
                                           "result rows.")] = False,
    net: Annotated[bool, typer.Option("--net", help="Every network sample (each cell's "
                                      "net.jsonl: per second, per slice and UE leaf, both "
                                      "directions) and link-conditions step applied, with its "
                                      "cell, repetition and scenario time t_s.")] = False,
) -> None:
    """Write a run's result rows (its results.json) or, with --requests, its request records, or
    with --net its network series, as CSV or JSON lines.

    Example: [bold]testbed export runs/20261122T050000Z-smoke --format csv --out smoke.csv[/]
    """
    from testbed.cli.checks import writable_file
    from testbed.report.export import check_run_dir
    from testbed.report.export import export as write_export

    check_run_dir(run_dir)
    if requests and net:
        from testbed.errors import ConfigError, ConfigProblem

        raise ConfigError([ConfigProblem("testbed export", None, "--net",
                                         "give --requests or --net, not both")])
    if out != "-":
        writable_file("--out", Path(out))
    n = write_export(run_dir, sys.stdout if out == "-" else Path(out), fmt.value,
                     requests=requests, net=net)
    what = "request records" if requests else "network samples" if net else "rows"
    if out == "-":  # standard output holds the data alone
        err_console.print(f"wrote {n} {what} to standard output", highlight=False)
    else:
        console.print(f"wrote {n} {what} to {out}", highlight=False)
