"""`testbed load` from its checked options to its exit: the options checked before the first
request, the client driven (under a live table) until its schedule ends or a signal stops it, and
the end-of-run summary and exit status."""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from testbed.cli import checks, console, err_console, show_traces
from testbed.errors import ConfigError, ConfigProblem

if TYPE_CHECKING:
    from testbed.load.runner import LoadSpec
    from testbed.load.stats import LiveFigures, RunTotals


def check_load_mode(trace: Path | None, rate: float | None, closed: int | None,
                     duration: float | None) -> None:
    """Exactly one of --trace, --rate, --closed; the last two need a --duration."""
    modes = sum(x is not None for x in (trace, rate, closed))
    if modes != 1:
        raise ConfigError(
            [ConfigProblem("testbed load", None, "", "give exactly one of --trace, --rate, --closed")]
        )
    if (rate is not None or closed is not None) and duration is None:
        raise ConfigError(
            [ConfigProblem("testbed load", None, "--duration", "required with --rate/--closed")]
        )


def checked_load_spec(spec: LoadSpec, max_error_rate: float) -> LoadSpec:
    """`spec` with --source resolved, once every value has passed its check.

    Every value is checked before the first request: a zero rate or a foreign --source must not
    print a summary and exit 0, an unwritable --out must not be found after the run.
    """
    from testbed.load.trace import load_trace

    checks.http_url("--url", spec.url, schemes=("http",))
    checks.number("--rate", spec.rate, gt=0, le=1e6)
    checks.number("--duration", spec.duration_s, gt=0, le=31 * 86400)
    closed = spec.closed_workers
    if closed is not None and not 1 <= closed <= 10_000:
        raise checks.bad("--closed", f"must be 1-10000 workers, got {closed}")
    checks.number("--ratio", spec.ratio, ge=0, le=1e6)
    checks.number("--speedup", spec.speedup, gt=0, le=1e6)
    checks.number("--shift", spec.shift_hours, ge=0, le=1e6)
    checks.number("--start", spec.start_s, ge=0)
    checks.number("--start-at", spec.start_at, gt=0)
    checks.number("--timeout", spec.timeout_s, gt=0, le=3600)
    checks.number("--max-error-rate", max_error_rate, ge=0, le=1)
    checks.trace_units(spec.trace_time_unit, spec.trace_rate_unit)
    if spec.source_addresses:
        spec = dataclasses.replace(spec, source_addresses=tuple(
            checks.local_address("--source", a) for a in spec.source_addresses))
    if spec.trace is not None:
        show_traces([load_trace(spec.trace, time_unit=spec.trace_time_unit,
                                rate_unit=spec.trace_rate_unit)])  # its errors name the file and line
    if spec.out is not None:
        checks.writable_file("--out", spec.out)
    return spec


def drive_load(spec: LoadSpec, totals: RunTotals, *, live_view: bool) -> bool:
    """Run `spec` until its schedule ends (True) or SIGINT/SIGTERM stops it (False), counting
    every request in `totals`; with `live_view`, a live table of the figures meanwhile."""
    # asyncio, the load client and rich's live view: loaded only when `load` runs
    import asyncio

    from rich.live import Live

    from testbed.load.runner import run_load

    async def main() -> bool:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)  # type: ignore[union-attr]
        try:
            if not live_view:
                await run_load(spec, totals=totals)
            else:
                with Live(console=console, refresh_per_second=4, transient=True) as live:
                    await run_load(spec, on_tick=lambda f, n, e: live.update(
                        _live_load_table(spec, f, n, e)), totals=totals)
        except asyncio.CancelledError:
            return False
        return True

    return asyncio.run(main())


def _live_load_table(spec: LoadSpec, fig: LiveFigures, in_flight: int, elapsed: float) -> Table:
    """The live view of `testbed load`: the last window's figures, redrawn every tick."""
    t = Table(title=f"{spec.service} → {spec.url}  ({elapsed:.0f} s)")
    for col in ("rate/s", "p50 ms", "p99 ms", "SLO viol.", "in flight", "done", "errors"):
        t.add_column(col, justify="right")
    fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    errs = ", ".join(f"{k}:{v}" for k, v in sorted(fig.errors.items())) or "0"
    t.add_row(
        f"{fig.rate:.1f}",
        fmt(fig.p50_ms),
        fmt(fig.p99_ms),
        f"{fig.violation_rate:.1%}",
        str(in_flight),
        str(fig.total),
        errs,
    )
    return t


def print_load_summary(spec: LoadSpec, figures: dict[str, Any], *, interrupted: bool,
                        as_json: bool) -> None:
    """The end-of-run summary: one JSON line on stdout with --json, else a table."""
    if as_json:
        print(json.dumps({"service": spec.service, "url": spec.url, "interrupted": interrupted,
                          "records": str(spec.out) if spec.out else None, **figures}))
    else:
        console.print(load_summary_table(spec.service, spec.url, figures, interrupted=interrupted,
                                         records=spec.out))


def exit_past_error_rate(totals: RunTotals, max_error_rate: float, *, completed: bool) -> None:
    """Exit 3 when more than --max-error-rate of the finished requests failed, or when a run that
    was not interrupted finished none."""
    if totals.finished and totals.error_rate > max_error_rate:
        err_console.print(f"error: {totals.error_rate:.1%} of {totals.finished} requests failed "
                      f"(> --max-error-rate {max_error_rate:g}): "
                      + ", ".join(f"{k} {v}" for k, v in sorted(totals.errors.items())))
        raise typer.Exit(3)
    if not totals.finished and completed:
        err_console.print("error: no request finished")
        raise typer.Exit(3)


def load_summary_table(service: str, url: str, f: dict[str, Any], *, interrupted: bool,
                       records: Path | None) -> Table:
    """k6-style end-of-run summary of `testbed load`."""
    def ms(v: Any) -> str:
        return "-" if v is None else f"{v:.1f}"
    title = f"{service} → {url}: {f['finished']} requests in {f['elapsed_s']:.1f} s" + \
        (" (interrupted)" if interrupted else "")
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("what")
    t.add_column("value")
    t.add_row("rate", f"{f['rate_per_s']:.2f} req/s (wall)")
    t.add_row("ok / errors", f"{f['ok']} / {f['finished'] - f['ok']} ({f['error_rate']:.1%})")
    errors = f["errors"]
    t.add_row("errors by kind", ", ".join(f"{k} {v}" for k, v in errors.items()) or "none")
    t.add_row("latency p50 / p90 / p95 / p99 / max",
              " / ".join(ms(f[k]) for k in ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms"))
              + " ms (from the scheduled send)")
    t.add_row(f"SLO ({f['slo_ms']:g} ms) violations", str(f["slo_violations"]))
    t.add_row("bytes sent / received", f"{f['bytes_sent']:,} / {f['bytes_received']:,}")
    if records is not None:
        t.add_row("records", str(records))
    return t
