"""Which time scale this machine holds now, measured on the spot by a short probe: before a run
that asks for `--time-scale auto` (`choose_time_scale`), and after a cell whose clients fell
behind their schedule (`advice`: how to rerun at it).

The probe is the load client against a bare HTTP server in another process, at the scenario's
busiest rate times a candidate time scale times HARNESS_COST_RATIO (what a request costs the
whole harness over what it costs the probe), for PROBE_STEP_S per candidate, from the run's time
scale down: the first candidate at which the client's p99 lateness, in scenario time, stays
within the cells' bound (LATENESS_SLO_SHARE of the SLO) is the time scale the machine holds.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from aiohttp import web

from testbed.clock import ScenarioClock
from testbed.load.api import PreparedRequest
from testbed.load.client import ClientConfig, LoadClient
from testbed.load.stats import percentile
from testbed.load.trace import constant_schedule
from testbed.profiles.registry import default_profiles
from testbed.scenario.profiles import scenario_profiles
from testbed.scenario.results import LATENESS_SLO_SHARE, behind_cells, read_records

# CPU per request of the harness (clients, balancer, replicas, kernel: 2.32 ms at time scale 16,
# 185 req/s, bench/request_cost.py) over the probe's (the load client and a bare server: 0.47 +
# 0.66 ms at 200 req/s, bench/loadgen.py --rates 200); docs/pace.md. The probe sends this many
# requests for each of the scenario's
HARNESS_COST_RATIO = 2.0
PROBE_STEP_S = 0.4
# `--time-scale auto` tries this and below (a quiet 2-core host held 24 in docs/table-5.4.md,
# and issue 54 asks a quiet host for 32); a scenario whose replicas do their real work is not
# run faster than it asks for
AUTO_MAX_TIME_SCALE = 32.0


def planned_peak_rate(scn: Any, base_dir: Path) -> float:
    """Requests per second of scenario time in the busiest second of the scenario's schedules
    (every client together, its warm-up included), as the clients will send them.

    scn: the scenario; base_dir: its folder (its traces and profiles)."""
    from testbed.scenario.cell import load_job  # the cell's module imports the scenario's policies

    per_second: Counter[int] = Counter()
    clock = ScenarioClock(scn.time_scale)
    for i, c in enumerate(scn.clients):
        for t in load_job(scn, c, i, 0, base_dir).offsets():
            per_second[int(clock.scenario(t))] += 1
    return float(max(per_second.values())) if per_second else 0.0


def choose_time_scale(scn: Any, base_dir: Path, probe: Any = None) -> tuple[float, str]:
    """(the time scale to run `scn` at, the line that says so) for `--time-scale auto`: the
    highest the probe finds this machine holds now at the scenario's busiest second, up to
    AUTO_MAX_TIME_SCALE (the scenario's own where its replicas do their real work).

    scn: the scenario; base_dir: its folder; probe: held_time_scale's signature (default
    held_time_scale)."""
    top = AUTO_MAX_TIME_SCALE if scn.replica_work == "sleep" else max(1.0, scn.time_scale)
    rate = planned_peak_rate(scn.model_copy(update={"time_scale": 1.0}), base_dir)
    profiles = scenario_profiles(scn, base_dir)
    slo = min(float(profiles[s.name].slo_ms) for s in scn.services)
    if rate <= 0:
        return top, f"time scale auto: {top:g} (the scenario sends no requests to probe with)"
    held, late = (probe or held_time_scale)(rate, slo, top)
    bound = LATENESS_SLO_SHARE * slo
    return held, (f"time scale auto: this machine holds {held:g} now (probe p99 lateness "
                  f"{late:.0f} ms against {bound:.0f} ms at the scenario's peak of {rate:.0f} "
                  f"requests/s, tried from {top:g} down)")


def peak_rate(records: dict[str, list[dict[str, Any]]], clock: ScenarioClock) -> float:
    """Requests per second of scenario time in the busiest scenario second, all services
    together, from a cell's request `records` (their `scheduled` epoch seconds) on `clock`."""
    bins = Counter(int(clock.scenario(r["scheduled"])) for recs in records.values() for r in recs
                   if r.get("scheduled"))
    return float(max(bins.values())) if bins else 0.0


def candidates(top: float) -> list[float]:
    """The time scales the probe tries, highest first: `top` (the run's), three quarters of it,
    then halving, down to 1 (whole numbers below the run's)."""
    steps = {top, max(1.0, float(int(top * 0.75)))}
    k = 2
    while top / k > 1:
        steps.add(float(int(top / k)))
        k *= 2
    return sorted((s for s in steps | {1.0} if s >= 1.0), reverse=True)


def held_time_scale(rate: float, slo_ms: float, time_scale: float,
                    step_s: float = PROBE_STEP_S) -> tuple[float, float]:
    """(the highest of candidates(`time_scale`) this machine holds now at `rate` scenario requests
    per second for an SLO of `slo_ms`, the probe's p99 lateness there in scenario ms); 1 with the
    lateness at 1 when none holds. Each candidate sends for `step_s`, or as long as 50 requests
    take (at most 2 s), plus about a second to start."""
    server = subprocess.Popen([sys.executable, "-m", "testbed.scenario.pace", "--serve"],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[-1])  # type: ignore[union-attr]
        return asyncio.run(_probe(f"http://127.0.0.1:{port}", rate, slo_ms, time_scale, step_s))
    finally:
        server.terminate()
        server.wait()


async def _probe(url: str, rate: float, slo_ms: float, time_scale: float, step_s: float
                 ) -> tuple[float, float]:
    req = PreparedRequest("POST", "/api/generate", b'{"prompt":"hi"}',
                          {"Content-Type": "application/json"})
    bound = LATENESS_SLO_SHARE * slo_ms
    label = next(iter(default_profiles()))  # the bare server answers any service's request alike
    late = float("nan")
    for scale in candidates(time_scale):
        records: list[Any] = []
        clock = ScenarioClock(scale)
        async with LoadClient(ClientConfig(label, url, check=False), [records.append],
                              request_factory=lambda: req) as client:
            await client.run_closed_loop(workers=8, requests=32)  # connections open, as in a run
            records.clear()
            sends = clock.wall_rate(rate) * HARNESS_COST_RATIO
            await client.run_open_loop(constant_schedule(sends, min(2.0, max(step_s, 50 / sends))))
        late = clock.scenario(percentile([r.lateness_ms for r in records], 0.99) or 0.0)
        if late <= bound:
            return scale, late
    return 1.0, late


def advice(run_dir: Path, rerun: list[str], probe: Any = None) -> str | None:
    """One line when a cell of `run_dir` failed because its clients fell behind: the time scale
    the machine holds now, measured by the probe (`probe`: held_time_scale's signature, by
    default held_time_scale), and the command that reruns at it (`rerun`: the run's command
    without --time-scale); None when no cell fell behind."""
    behind = behind_cells(run_dir)
    if not behind:
        return None
    first = next(iter(behind))
    info = json.loads((run_dir / "cells" / first / "cell.json").read_text())
    clock = ScenarioClock.of_cell(info)
    time_scale = clock.scale
    services = sorted({s for late in behind.values() for s in late})
    rate = peak_rate(read_records(run_dir / "cells" / first), clock)
    slo = min(float((info.get("slo_ms") or {}).get(s, 1000.0)) for s in services)
    held, late = (probe or held_time_scale)(rate, slo, time_scale)
    cmd = " ".join([*rerun, "--time-scale", f"{held:g}"])
    bound = LATENESS_SLO_SHARE * slo
    holds = f"it holds time scale {held:g}" if late <= bound else "it does not hold even time scale 1"
    return (f"the machine fell behind at time scale {time_scale:g} ({', '.join(services)}); "
            f"measured now, {holds} for this scenario's peak of {rate:.0f} "
            f"requests/s (probe p99 lateness {late:.0f} ms, bound {bound:.0f} "
            f"ms, scenario time): rerun with {cmd}")


def _serve() -> None:
    """The probe's bare server: answers every POST /api/generate at once; prints its port."""
    async def ok(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"response": "ok"})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/api/generate", ok)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        print("LISTENING", site._server.sockets[0].getsockname()[1], flush=True)  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(main())


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    _serve()
