"""Service commands: `testbed services up|down|scale|status`, `testbed load`, `testbed profile`."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import typer
from rich.table import Table

from testbed.cli import app, checks, console, err_console, show_traces
from testbed.errors import ConfigError, ConfigProblem
from testbed.paths import LOCAL_ADMIN_PORT
from testbed.profiles.paper import SERVICES, TOTAL_UNITS

if TYPE_CHECKING:
    from testbed.cluster.local import ClusterEvent
    from testbed.load.runner import LoadSpec
    from testbed.load.stats import LiveFigures, RunTotals

services_app = typer.Typer(
    help="Emulated AI services on this machine (the local profile).", no_args_is_help=True
)
app.add_typer(services_app, name="services")

_ADMIN = typer.Option(f"http://127.0.0.1:{LOCAL_ADMIN_PORT}", "--admin",
                      help="Metrics/control URL of `services up`.")
_TOKEN = typer.Option(None, "--token-file", help="The admin token of `services up` (default: "
                      "the one it wrote for the URL's port in the state directory).")


def admin_token_file(port: int) -> Path:
    """Where `services up` keeps the admin token of its metrics/control port (root only)."""
    from testbed.net.state import state_dir  # the config models behind it: not for `--help`

    return state_dir() / f"services-{port}.token"


def _token(admin: str, token_file: Path | None) -> str:
    from testbed.cluster.local.admin import read_token  # aiohttp: only for the admin commands

    if token_file is None:
        try:
            port = urlsplit(admin).port or 80
        except ValueError:
            raise typer.BadParameter(f"--admin {admin!r} is not a URL") from None
        token_file = admin_token_file(port)
    return read_token(token_file)


@services_app.command("up")
def services_up(
    services: str = typer.Option(",".join(SERVICES), help="Comma-separated services to run."),
    replicas: int = typer.Option(1, min=0, help="Initial replicas per service."),
    units: int = typer.Option(TOTAL_UNITS, min=1, help="Resource units (vGPUs) shared by all services."),
    time_scale: float = typer.Option(1.0, help="Divide every profile time by this factor."),
    host: str = typer.Option("127.0.0.1", help="Address the load balancer listens on (e.g. 10.200.0.2)."),
    port_base: int = typer.Option(LOCAL_ADMIN_PORT,
                                  help="Metrics/control on PORT, services on PORT+1, PORT+2, ..."),
    profiles: Path | None = typer.Option(None, help="Profile YAML (default: dissertation Table 4.4)."),
    log_dir: Path | None = typer.Option(None, help="Write each replica's stderr here."),
) -> None:
    """Run emulated replicas behind the load balancer until Ctrl-C or `testbed services down`.

    Example: [b]ip netns exec tb-x-dn testbed services up --host 10.200.0.2 --time-scale 10[/]
    """
    # asyncio, the cluster and the profile models: loaded only when this command runs (fast CLI start)
    import asyncio

    from testbed.cluster.local import LocalCluster, LocalClusterConfig
    from testbed.cluster.local.admin import add_admin_routes, new_token, write_token
    from testbed.profiles import load_profiles

    profs = load_profiles(profiles)
    names = _service_list(services, profs)
    checks.port("--port-base", port_base, span=len(names) + 1)
    checks.number("--time-scale", time_scale, gt=0, le=1000)
    host = checks.local_address("--host", host)
    if log_dir is not None:
        checks.writable_dir("--log-dir", log_dir)
    ports = {s: port_base + 1 + i for i, s in enumerate(names)}
    token, token_file = new_token(), admin_token_file(port_base)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        config = LocalClusterConfig(
            profiles=profs,
            services=names,
            initial=replicas,
            total_units=units,
            time_scale=time_scale,
            host=host,
            ports=ports,
            metrics_port=port_base,
            log_dir=log_dir,
        )
        cluster = LocalCluster(config, on_event=_print_event)
        add_admin_routes(cluster, stop, token)
        async with cluster:
            write_token(token_file, token)  # once the port is ours: never another run's file
            written.append(token_file)
            for s in names:
                console.print(f"[bold]{s}[/] {cluster.endpoint(s)}")
            console.print(
                f"metrics {cluster.metrics_url}/metrics   control {cluster.metrics_url}/admin/status"
                f" (token in {token_file})"
            )
            await stop.wait()
            console.print("stopping replicas (finishing in-flight requests)...")

    written: list[Path] = []
    try:
        asyncio.run(run())
    finally:
        for f in written:
            with contextlib.suppress(OSError):
                if f.read_text().strip() == token:
                    f.unlink()


@services_app.command("scale")
def services_scale(service: str, replicas: int, admin: str = _ADMIN,
                   token_file: Path | None = _TOKEN) -> None:
    """Set the replica count of a running service.  Example: [b]testbed services scale imgcls 3[/]"""
    checks.http_url("--admin", admin)
    # asyncio and the admin client: loaded only when this command runs (fast CLI start)
    import asyncio

    from testbed.cluster.local.admin import admin_call

    doc = asyncio.run(admin_call(admin, "POST", "/admin/scale", {"service": service, "replicas": replicas},
                                 token=_token(admin, token_file)))
    _print_status(doc)


@services_app.command("status")
def services_status(admin: str = _ADMIN, as_json: bool = typer.Option(False, "--json"),
                    token_file: Path | None = _TOKEN) -> None:
    """Replicas, readiness and free units.  Example: [b]testbed services status --json[/]"""
    checks.http_url("--admin", admin)
    # asyncio and the admin client: loaded only when this command runs (fast CLI start)
    import asyncio

    from testbed.cluster.local.admin import admin_call

    doc = asyncio.run(admin_call(admin, "GET", "/admin/status", token=_token(admin, token_file)))
    if as_json:
        console.print_json(json.dumps(doc))
    else:
        _print_status(doc)


@services_app.command("down")
def services_down(admin: str = _ADMIN, token_file: Path | None = _TOKEN) -> None:
    """Stop a running `services up` gracefully.  Example: [b]testbed services down[/]"""
    checks.http_url("--admin", admin)
    # asyncio and the admin client: loaded only when this command runs (fast CLI start)
    import asyncio

    from testbed.cluster.local.admin import admin_call

    asyncio.run(admin_call(admin, "POST", "/admin/shutdown", token=_token(admin, token_file)))
    console.print("stopping")


def _print_event(e: ClusterEvent) -> None:
    # lost client connections are counted (status, /metrics), not printed one by one
    if e.kind != "connection_lost":
        console.print(f"[dim]{e.replica}[/] {e.kind} {e.detail}")


def _print_status(doc: dict) -> None:
    table = Table("service", "desired", "ready", "replicas", "endpoint")
    for name, st in doc.items():
        if name.startswith("_"):
            continue
        reps = ", ".join(f"{k}:{v}" for k, v in st["replicas"].items())
        table.add_row(name, str(st["desired"]), str(st["ready"]), reps, st["endpoint"])
    console.print(table)
    c = doc.get("_cluster", {})
    lost = sum((c.get("lost_connections") or {}).values())
    console.print(f"units free {c.get('free_units')}/{c.get('total_units')}  metrics {c.get('metrics')}"
                  f"  lost client connections {lost}")


def _service_list(text: str, profs: dict) -> list[str]:
    from testbed.profiles import profile_for  # pydantic models: not for `--help`

    names = [s.strip() for s in text.split(",") if s.strip()]
    for s in names:
        profile_for(profs, s, "--services")
    return names


@app.command("load")
def load(
    service: str = typer.Argument(..., help="A registered service (chatbot, imgcls, tts, or one of "
                                  "--profiles FILE)."),
    url: str = typer.Option(..., help="The service's endpoint (load balancer), e.g. http://10.200.0.2:8001"),
    trace: Path | None = typer.Option(None, help="Trace file: 'DURATION COUNT' lines or CSV "
                                      "(docs/traces.md)."),
    trace_time_unit: str | None = typer.Option(
        None, help="A CSV trace's time (or interval) unit where its header states none: ms, s, "
        "min, h."),
    trace_rate_unit: str | None = typer.Option(
        None, help="A CSV trace's rate unit where its header states none: per_s, per_min, per_h."),
    ratio: float = typer.Option(1.0, help="Request-scaling ratio applied to the trace's counts."),
    shift: float = typer.Option(0.0, help="Rotate the trace by this many hours."),
    start: float = typer.Option(0.0, help="Skip this many seconds of the trace."),
    duration: float | None = typer.Option(None, help="Seconds of trace (or of constant/closed load)."),
    speedup: float = typer.Option(1.0, help="Replay the trace this many times faster."),
    start_at: float | None = typer.Option(
        None, help="When the schedule begins, in epoch seconds (default: as soon as the client "
        "is ready): clients given the same moment keep one schedule. A client ready only after "
        "it sends its first requests late, and records how late."),
    start_gate: Path | None = typer.Option(
        None, help="Say it is ready (a file GATE.ready.PID) and wait until GATE holds the epoch "
        "second the schedule begins (written by whoever started several clients, once all are "
        "ready: testbed.load.gate)."),
    rate: float | None = typer.Option(None, help="Constant rate (req/s) instead of a trace."),
    closed: int | None = typer.Option(None, help="Closed loop with this many workers instead."),
    out: Path | None = typer.Option(None, help="Append one JSON line per request here."),
    slice_name: str | None = typer.Option(None, "--slice", help="Slice name recorded with each request."),
    ue_group: str | None = typer.Option(None, "--ue-group", help="UE group recorded with each request."),
    source: list[str] | None = typer.Option(
        None, help="Bind connections to this local address; repeated, requests take the addresses "
        "in turn, each with connections of its own (a UE group's UEs)."),
    new_connections: bool = typer.Option(
        False, "--new-connections", help="A new connection for every request (Connection: close), "
        "as the dissertation's client sends them; default: keep-alive connections, reused."),
    timeout: float = typer.Option(4.0, help="Request timeout in seconds."),
    seed: int = typer.Option(0, help="Seed of the request content."),
    profiles: Path | None = typer.Option(None, help="Profile YAML (for the SLO threshold)."),
    quiet: bool = typer.Option(False, "--no-progress", "--quiet", help="No live view (for runs "
                               "in the background)."),
    max_error_rate: float = typer.Option(
        0.1, help="Exit with status 3 when more than this share of the finished requests failed "
        "(errors of any kind, e.g. refused, timeout, 5xx); 1 never fails."),
    as_json: bool = typer.Option(False, "--json", help="Print the end-of-run summary as JSON "
                                 "on stdout instead of a table."),
) -> None:
    """Send requests to a service and record each one; at the end (also on Ctrl-C) print count,
    rate, latency percentiles, errors by kind and bytes, and exit non-zero past --max-error-rate.

    Example: [b]ip netns exec tb-x-ue-embb testbed load chatbot --url http://10.200.0.2:8001
    --trace traces/test/day7-shift0h.txt --ratio 0.15 --duration 600 --out records.jsonl[/]
    """
    # the load client and the profile models: loaded only when this command runs
    from testbed.load.runner import LoadSpec
    from testbed.load.stats import RunTotals
    from testbed.profiles import load_profiles, profile_for

    profile = profile_for(load_profiles(profiles), service, "SERVICE")
    slo_ms = profile.slo_ms
    _check_load_mode(trace, rate, closed, duration)
    spec = _checked_load_spec(LoadSpec(
        service=service, url=url, trace=trace, trace_time_unit=trace_time_unit,
        trace_rate_unit=trace_rate_unit, ratio=ratio, shift_hours=shift, start_s=start,
        duration_s=duration, speedup=speedup, rate=rate, closed_workers=closed, out=out,
        slice=slice_name, ue_group=ue_group, source_addresses=tuple(source or ()), timeout_s=timeout,
        seed=seed,
        slo_ms=slo_ms,
        keep_alive=not new_connections, profile=profile, start_at=start_at, start_gate=start_gate,
    ), max_error_rate)
    totals = RunTotals(slo_ms)
    completed = _drive_load(spec, totals, live_view=not (quiet or as_json))
    _print_load_summary(spec, totals.summary(), interrupted=not completed, as_json=as_json)
    _exit_past_error_rate(totals, max_error_rate, completed=completed)


def _check_load_mode(trace: Path | None, rate: float | None, closed: int | None,
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


def _checked_load_spec(spec: LoadSpec, max_error_rate: float) -> LoadSpec:
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


def _drive_load(spec: LoadSpec, totals: RunTotals, *, live_view: bool) -> bool:
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


def _print_load_summary(spec: LoadSpec, figures: dict[str, Any], *, interrupted: bool,
                        as_json: bool) -> None:
    """The end-of-run summary: one JSON line on stdout with --json, else a table."""
    if as_json:
        print(json.dumps({"service": spec.service, "url": spec.url, "interrupted": interrupted,
                          "records": str(spec.out) if spec.out else None, **figures}))
    else:
        console.print(load_summary_table(spec.service, spec.url, figures, interrupted=interrupted,
                                         records=spec.out))


def _exit_past_error_rate(totals: RunTotals, max_error_rate: float, *, completed: bool) -> None:
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


@app.command("profile")
def profile(
    service: str = typer.Argument(..., help="A registered service (chatbot, imgcls, tts, or one of "
                                  "--profiles FILE)."),
    url: str = typer.Option(..., help="One replica's (or the service's) URL."),
    out: Path = typer.Option(Path("profiles.yaml"), help="Profile YAML to write (merged over existing)."),
    requests: int = typer.Option(50, help="Closed-loop requests for the processing time."),
    step: float = typer.Option(5.0, help="Seconds per rate in the capacity sweep."),
    startup_local: bool = typer.Option(
        False, help="Also time a new emulated replica's startup (LocalCluster)."
    ),
    time_scale: float = typer.Option(1.0, help="Time scale of --startup-local."),
) -> None:
    """Measure processing-time range, capacity and (optionally) startup time; write a profile YAML.

    Example: [b]testbed profile imgcls --url http://127.0.0.1:8002 --out profiles.yaml[/]
    """
    # asyncio, the profiler and the profile models: loaded only when this command runs
    import asyncio

    from testbed.load.profiler import measure_startup, profile_service
    from testbed.profiles import load_profiles, profile_for, write_profiles

    checks.http_url("--url", url, schemes=("http",))
    checks.writable_file("--out", out)  # before minutes of measuring
    if requests < 1:
        raise checks.bad("--requests", f"must be >= 1, got {requests}")
    checks.number("--step", step, gt=0, le=3600)
    checks.number("--time-scale", time_scale, gt=0, le=1000)
    profs = load_profiles(out if out.exists() else None)
    base = profile_for(profs, service, "SERVICE")

    async def main():  # type: ignore[no-untyped-def]
        res = await profile_service(service, url, requests, step, progress=lambda m: console.print(m))
        if startup_local:
            from testbed.cluster.local import LocalCluster, LocalClusterConfig

            config = LocalClusterConfig(
                profiles=profs,
                services=[service],
                initial=1,
                time_scale=time_scale,
            )
            async with LocalCluster(config) as c:
                await c.wait_ready(c.clock.wall(base.startup_ms / 1000) + 30)
                res.startup_ms = c.clock.scenario(await measure_startup(c, service))
        return res

    res = asyncio.run(main())
    profs[service] = res.to_profile(base)
    write_profiles(out, profs)
    p = profs[service]
    console.print(
        f"{service}: processing {p.proc_time_ms[0]:.0f}–{p.proc_time_ms[1]:.0f} ms, capacity "
        f"{p.capacity}, startup {p.startup_ms:.0f} ms, SLO {p.slo_ms:.0f} ms → {out}"
    )
