"""Service commands: `testbed services up|down|scale|status`, `testbed load`, `testbed profile`."""

from __future__ import annotations

import contextlib
import json
import signal
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import typer
from rich.table import Table

from testbed.cli import app, checks, console
from testbed.cli.load_run import (
    check_load_mode,
    checked_load_spec,
    drive_load,
    exit_past_error_rate,
    print_load_summary,
)
from testbed.paths import LOCAL_ADMIN_PORT
from testbed.profiles.paper import SERVICES, TOTAL_UNITS

if TYPE_CHECKING:
    from testbed.cluster.local import ClusterEvent

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
    check_load_mode(trace, rate, closed, duration)
    spec = checked_load_spec(LoadSpec(
        service=service, url=url, trace=trace, trace_time_unit=trace_time_unit,
        trace_rate_unit=trace_rate_unit, ratio=ratio, shift_hours=shift, start_s=start,
        duration_s=duration, speedup=speedup, rate=rate, closed_workers=closed, out=out,
        slice=slice_name, ue_group=ue_group, source_addresses=tuple(source or ()), timeout_s=timeout,
        seed=seed,
        slo_ms=slo_ms,
        keep_alive=not new_connections, profile=profile, start_at=start_at, start_gate=start_gate,
    ), max_error_rate)
    totals = RunTotals(slo_ms)
    completed = drive_load(spec, totals, live_view=not (quiet or as_json))
    print_load_summary(spec, totals.summary(), interrupted=not completed, as_json=as_json)
    exit_past_error_rate(totals, max_error_rate, completed=completed)


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
