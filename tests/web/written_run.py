"""A run directory written here in the formats a run writes (testbed.scenario.rundir, cell.py,
the load client's records, testbed.net.netstats): a fixture, not a recording, for the live page's
tests; it grows in steps as a running cell's files do."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from testbed.judge.outcome import evaluate_all
from testbed.scenario.results import run_rows
from testbed.scenario.rundir import append_jsonl

START = 1_800_000_000.0  # the load's start, epoch seconds
TIME_SCALE = 2.0
WARMUP_S = 4.0
DURATION_S = 10.0
SECRET = "sEcReT-7f3a9c"  # planted wherever a secret could sit in a run directory


def manifest(**scenario: Any) -> dict[str, Any]:
    """A manifest as `write_manifest` writes it, with a secret where one could be unmasked: the
    core's database address, the command line, a UE group's keys (masked by the run: here not)."""
    scn = {"name": "written", "description": "a run written by the tests", "engine": "testbed",
           "duration_s": DURATION_S, "warmup_s": WARMUP_S, "time_scale": TIME_SCALE,
           "repetitions": 1, "seed": 1, "scaler_period_s": 30,
           "services": [{"name": "imgcls", "replicas": 1, "policy": "rule_v2"}],
           "clients": [{"service": "imgcls", "ue_group": "ai", "rate": 2}],
           "expect": ["requests[service=imgcls] >= 1"], **scenario}
    return {"format": 1, "created": "2027-01-15T08:00:00+00:00", "source": "written.yaml",
            "base_dir": "scenarios", "profile": "local", "scenario": scn,
            "testbed": {"name": "main", "core": {"key_seed": SECRET,
                                                 "mongo_uri": f"mongodb://admin:{SECRET}@db/"},
                        "link": {"capacity_mbit": 100},
                        "slices": [{"name": "ai", "sst": 1, "sd": "000001", "subnet": "10.45.0.0/24",
                                    "guaranteed_mbit": 20}],
                        "ue_groups": [{"name": "ai", "slice": "ai", "count": 2, "k": SECRET,
                                       "opc": SECRET}]},
            "service_profiles": {}, "overrides": {}, "seed": 1, "commit": "abc",
            "packages": {}, "host": {"hostname": "h", "cpus": 2}, "argv": ["testbed", "run",
                                                                          f"--mongo-uri={SECRET}"]}


def record(seq: int, sent_s: float, latency_ms: float, *, error: str | None = None,
           server_ms: float | None = None, late_ms: float = 1.0) -> dict[str, Any]:
    """A request record sent `sent_s` wall seconds after the load's start."""
    sent = START + sent_s
    return {"service": "imgcls", "slice": "ai", "seq": seq, "scheduled": sent - late_ms / 1000,
            "sent": sent, "latency_ms": latency_ms, "latency_sched_ms": latency_ms + late_ms,
            "status": 0 if error else 200, "bytes_up": 100, "bytes_down": 10, "error": error,
            "server_ms": server_ms if server_ms is not None else latency_ms / 2,
            "dispatched": sent - late_ms / 1000 + late_ms / 1000, "ue_group": "ai"}


class WrittenRun:
    """A run directory with one cell of one service, grown by `write_*` as a run would."""

    def __init__(self, root: Path, *, params: dict[str, Any] | None = None, slug: str = "00-base"):
        self.path = root / "20270115T080000Z-written"
        self.cell = self.path / "cells" / slug / "rep-0"
        (self.cell / "requests").mkdir(parents=True)
        (self.path / "manifest.json").write_text(json.dumps(manifest()))
        self.info: dict[str, Any] = {
            "slug": slug, "label": "base", "params": params or {}, "rep": 0,
            "services": ["imgcls"], "time_scale": TIME_SCALE, "duration_s": DURATION_S,
            "warmup_s": WARMUP_S, "slo_ms": {"imgcls": 500.0}, "status": "running",
            "profile": "local", "started": START - 10, "problems": []}
        self.write_info()

    def write_info(self, **update: Any) -> None:
        self.info.update(update)
        (self.cell / "cell.json").write_text(json.dumps(self.info))

    def start_load(self, warmup_requests: int = 0) -> None:
        """cell.json as the cell writes it when its load begins."""
        self.write_info(load_started=START, measure_started=START + WARMUP_S / TIME_SCALE,
                        warmup_requests={"imgcls-ai-0.jsonl": warmup_requests},
                        planned_requests={"imgcls": 0})

    def write_records(self, records: list[dict[str, Any]], partial: str = "") -> None:
        with (self.cell / "requests" / "imgcls-ai-0.jsonl").open("a") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
            f.write(partial)

    def write_sample(self, t: float, ready: int, desired: int, warmup: bool = False) -> None:
        append_jsonl(self.cell / "samples.jsonl", {
            "t": t, **({"warmup": True} if warmup else {}), "service": "imgcls", "ready": ready,
            "desired": desired, "arrivals_total": 0, "violations_total": 0, "utilization": 0.5,
            "mean_latency_ms": 50.0})

    def write_decision(self, t: float, applied: int) -> None:
        append_jsonl(self.cell / "decisions.jsonl", {
            "time": START + t, "service": "imgcls", "policy": "rule_v2", "proposed": applied,
            "applied": applied, "replicas_before": 1, "replicas_after": 1 + applied,
            "reward": -0.1, "t": t})

    def write_net(self, wall_s: float, slice_mbit: float, drops: int, ue_mbit: float = 0.0) -> None:
        t = START + wall_s
        append_jsonl(self.cell / "net.jsonl", {
            "t": t, "direction": "uplink", "slice": "ai", "group": None, "ue": None,
            "bytes": 0, "packets": 0, "drops": drops, "backlog_bytes": 0, "backlog_packets": 0,
            "rate_mbit": slice_mbit})
        for ue in ("10.45.0.2", "10.45.0.3"):
            append_jsonl(self.cell / "net.jsonl", {
                "t": t, "direction": "uplink", "slice": "ai", "group": "ai", "ue": ue, "bytes": 0,
                "packets": 0, "drops": 0, "backlog_bytes": 0, "backlog_packets": 0,
                "rate_mbit": ue_mbit})

    def write_problem(self, text: str) -> None:
        append_jsonl(self.cell / "events.jsonl", {"t": START, "kind": "problem", "detail": text})

    def finish(self) -> None:
        """The cell's end and the run's record, as the runner writes them."""
        self.write_info(status="ok", ended=START + 20, measured_s=DURATION_S)
        rows = run_rows(self.path)
        outcomes = evaluate_all(manifest()["scenario"]["expect"], rows)
        (self.path / "results.json").write_text(json.dumps(
            {"rows": rows, "expect": [asdict(o) for o in outcomes], "interrupted": False,
             "problems": []}, default=str))
