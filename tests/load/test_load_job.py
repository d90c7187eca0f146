"""A scenario's load client as `testbed load` reads it: the arguments `ClientJob.load_argv` builds
from a `LoadJob` parse with the real CLI parser into the job's values, and the job plans the
schedule the client then follows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer.main

from testbed.cli import _register, app
from testbed.load.trace import constant_schedule, load_trace, schedule_from_trace
from testbed.load.traffic import ClientJob, LoadJob


def _parsed(argv: list[str]) -> dict[str, Any]:
    """The `testbed load` parameters click makes of `argv`, without running the command."""
    _register()
    group = typer.main.get_command(app)
    ctx = group.make_context("testbed", ["load", *argv])
    load = group.get_command(ctx, "load")
    return load.make_context("load", list(argv), parent=ctx).params


def _client(job: LoadJob) -> ClientJob:
    return ClientJob.of(job, index=3, ue_group="ai", url="http://10.200.0.2:8001",
                        out=Path("cell/requests/imgcls-ai-3.jsonl"))


def _argv(client: ClientJob, trace: str | None) -> list[str]:
    return client.load_argv(out="/run/imgcls-ai-3.jsonl", slice="embb", sources=["10.45.0.2"],
                            trace=trace, ue_group=client.ue_group)


def test_a_rate_job_parses_into_its_values():
    job = LoadJob(service="imgcls", duration_s=120 / 7, timeout_s=4.0 / 7, seed=1003,
                  max_error_rate=1.0, rate=2.5 * 7)
    client = _client(job)
    p = _parsed(_argv(client, None))
    assert (p["service"], p["url"], p["out"], p["quiet"], p["slice_name"], p["source"]) == (
        "imgcls", "http://10.200.0.2:8001", Path("/run/imgcls-ai-3.jsonl"), True, "embb",
        ["10.45.0.2"])
    assert p["ue_group"] == "ai"  # recorded with each request
    assert p["rate"] == pytest.approx(job.rate, rel=1e-5)
    assert p["duration"] == pytest.approx(job.duration_s, rel=1e-5)
    assert p["timeout"] == pytest.approx(job.timeout_s, rel=1e-5)
    assert (p["seed"], p["max_error_rate"], p["trace"], p["closed"]) == (1003, 1.0, None, None)
    assert p["new_connections"] is False  # keep-alive unless the scenario asks otherwise
    assert job.offsets() == list(constant_schedule(p["rate"], p["duration"]))


def test_a_per_request_connections_job_asks_the_client_for_new_connections():
    job = LoadJob(service="imgcls", duration_s=10.0, rate=30.0, new_connections=True)
    assert _parsed(_argv(_client(job), None))["new_connections"] is True


def test_a_trace_job_parses_into_its_values(tmp_path: Path):
    trace = tmp_path / "steps.txt"
    trace.write_text("10 4\n10 7\n10 2\n")
    job = LoadJob(service="tts", duration_s=30.0, timeout_s=0.4, seed=7, max_error_rate=1.0,
                  trace=trace, ratio=1 / 3, shift_hours=0.5, start_s=20.0 / 3, speedup=10.0)
    client = _client(job)
    assert client.trace == trace
    p = _parsed(_argv(client, "/remote/trace-0-steps.txt"))
    assert p["trace"] == Path("/remote/trace-0-steps.txt") and p["rate"] is None
    for option, value in (("ratio", job.ratio), ("shift", job.shift_hours), ("start", job.start_s),
                          ("duration", job.duration_s), ("speedup", job.speedup)):
        assert p[option] == pytest.approx(value, rel=1e-5), option
    assert job.offsets() == list(schedule_from_trace(
        load_trace(trace), p["ratio"], p["shift"], p["start"], p["duration"], p["speedup"]))



@pytest.mark.parametrize("given, want", [("", 4.0 / 8), (", timeout_s: 0.5", 0.5 / 8)])
def test_a_scenarios_client_timeout_reaches_the_client_in_wall_seconds(given: str, want: float):
    """`clients[].timeout_s` (scenario seconds; 4 s by default, the load client's) becomes the
    client's `--timeout`, divided by the time scale as the rest of its schedule."""
    from testbed.scenario.cell import load_job
    from testbed.scenario.load import parse_scenario

    loaded = parse_scenario("name: t\nduration_s: 60\ntime_scale: 8\nservices: [{name: imgcls}]\n"
                            f"clients:\n  - {{service: imgcls, ue_group: ai, rate: 2{given}}}\n",
                            "t.yaml", Path.cwd())
    scn = loaded.scenario
    job = load_job(scn, scn.clients[0], 0, 0, Path.cwd())
    p = _parsed(_argv(_client(job), None))
    assert job.timeout_s == pytest.approx(want) and p["timeout"] == pytest.approx(want)
