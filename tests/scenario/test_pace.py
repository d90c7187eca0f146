"""Issue 41: when a cell's clients fell behind, `testbed run` says which time scale this machine
holds now (a probe measured on the spot) and how to rerun at it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.clock import ScenarioClock
from testbed.pytest_plugin import TESTBED_GROUP
from testbed.scenario.pace import advice, candidates, held_time_scale, peak_rate
from testbed.scenario.results import behind_cells

ROOT = Path(__file__).resolve().parents[2]


def _cell(run_dir: Path, slug: str, info: dict, records: list[dict]) -> None:
    d = run_dir / "cells" / slug / "rep-0"
    (d / "requests").mkdir(parents=True)
    (d / "cell.json").write_text(json.dumps(info))
    (d / "requests" / "imgcls.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _records(t0: float, per_second: list[int], time_scale: float) -> list[dict]:
    """Records scheduled `per_second[i]` times in scenario second i (wall = scenario / scale)."""
    out = []
    for i, n in enumerate(per_second):
        for k in range(n):
            out.append({"service": "imgcls", "seq": len(out), "scheduled": t0 + (i + k / n) / time_scale,
                        "sent": 0.0, "latency_ms": 1.0, "latency_sched_ms": 1.0, "status": 200,
                        "bytes_up": 1, "bytes_down": 1, "error": None})
    return out


def test_the_advice_names_the_scale_the_probe_measured_and_the_command(tmp_path: Path):
    t0 = 1_800_000_000.0  # on a whole scenario second at time scale 8
    info = {"time_scale": 8, "slo_ms": {"imgcls": 500, "chatbot": 2500}, "status": "failed",
            "behind_schedule": {"imgcls": 73.0}, "failures": ["imgcls: ..."]}
    _cell(tmp_path, "base", info, _records(t0, [5, 31, 12], 8))
    _cell(tmp_path, "other", {**info, "status": "ok", "behind_schedule": None}, [])
    asked = []

    def fake_probe(rate: float, slo_ms: float, time_scale: float) -> tuple[float, float]:
        asked.append((rate, slo_ms, time_scale))
        return 4.0, 31.5

    line = advice(tmp_path, ["testbed", "run", "scenarios/x.yaml"], probe=fake_probe)
    assert asked == [(31.0, 500.0, 8.0)]  # the busiest scenario second, imgcls's SLO, the run's scale
    assert line == ("the machine fell behind at time scale 8 (imgcls); measured now, it holds time "
                    "scale 4 for this scenario's peak of 31 requests/s (probe p99 lateness 32 ms, "
                    "bound 50 ms, scenario time): rerun with testbed run scenarios/x.yaml "
                    "--time-scale 4")
    assert "\n" not in line
    assert behind_cells(tmp_path) == {"base/rep-0": {"imgcls": 73.0}}
    (tmp_path / "cells" / "base" / "rep-0" / "cell.json").write_text(
        json.dumps({**info, "status": "ok", "behind_schedule": None}))
    assert advice(tmp_path, ["testbed", "run", "x.yaml"], probe=fake_probe) is None


def test_peak_rate_and_candidates():
    assert peak_rate({"a": _records(1_800_000_000.0, [3, 9, 2], 16)}, ScenarioClock(16)) == 9
    assert peak_rate({}, ScenarioClock(4)) == 0.0
    assert candidates(16) == [16, 12, 8, 4, 2, 1]
    assert candidates(400) == [400, 300, 200, 100, 50, 25, 12, 6, 3, 1]
    assert candidates(1.5) == [1.5, 1.0]


@pytest.mark.timed
@pytest.mark.xdist_group(TESTBED_GROUP)  # it saturates both cores on purpose: never beside a scenario
def test_the_probe_holds_a_light_load_and_not_one_beyond_what_a_process_sends():
    """The real probe (load client, bare server): 2 scenario requests/s at time scale 2 hold (a
    bound of 125 ms of wall time, for a busy machine too); 4,000 at time scale 4 do not (32,000
    requests/s for 0.4 s: 12,800 requests, more than the client hands to its connections in
    that time), and the scale it gives back keeps the bound or is 1. (At 2,000, 16,000 requests/s,
    the client with its timerfd wakes held time scale 4 in 2 of 3 tries on a quiet machine.)"""
    assert held_time_scale(2, 2500, 2)[0] == 2
    held, late = held_time_scale(4000, 500, 4)
    assert held < 4 and (held == 1 or late <= 50)


def test_auto_probes_the_scenarios_busiest_second_up_to_its_cap():
    """`--time-scale auto`: the probe is asked about the scenario's busiest second (smoke: 1 + 7
    + 1 requests a second) and its tightest SLO (imgcls's 500 ms), from 32 down with sleeping
    replicas and from the scenario's own scale with real work; its answer is the run's."""
    from testbed.scenario.load import load_scenario
    from testbed.scenario.pace import AUTO_MAX_TIME_SCALE, choose_time_scale

    asked = []

    def fake_probe(rate: float, slo_ms: float, top: float) -> tuple[float, float]:
        asked.append((rate, slo_ms, top))
        return 8.0, 12.0

    scn = load_scenario(ROOT / "scenarios" / "smoke.yaml").scenario
    scale, line = choose_time_scale(scn, ROOT / "scenarios", probe=fake_probe)
    assert scale == 8.0 and "holds 8 now" in line and "peak of 9 requests/s" in line
    real = scn.model_copy(update={"replica_work": "real"})
    choose_time_scale(real, ROOT / "scenarios", probe=fake_probe)
    assert asked == [(9.0, 500.0, AUTO_MAX_TIME_SCALE), (9.0, 500.0, scn.time_scale)]


def test_a_time_scale_that_is_neither_a_number_nor_auto_is_one_error(capsys):
    from testbed.cli import main

    assert main(["run", str(ROOT / "scenarios" / "smoke.yaml"), "--time-scale", "fast"]) == 2
    err = capsys.readouterr().err
    assert "--time-scale: a number or auto, not 'fast'" in err and err.count("error:") == 1
