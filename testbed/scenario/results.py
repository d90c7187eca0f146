"""Result rows from a run directory alone: one row per (cell, repetition, service or slice)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from testbed.clock import ScenarioClock
from testbed.errors import StateError
from testbed.load.records import schedule_lag_ms
from testbed.load.stats import percentile
from testbed.profiles import default_profiles
from testbed.scenario.rundir import read_jsonl
from testbed.sim.measure import DEFAULT_MEASURE

# the packaged profiles' thresholds (services.yaml, Table 4.4): the ones the scaler and the balancer
# read unless a scenario brings its own profiles
SLO_MS = {name: float(p.slo_ms) for name, p in default_profiles().items()}
# Error kinds of requests the service never answered through no fault of its own: the harness
# gave them up (client stopped, testbed going down) or nothing listened at the endpoint.
LOST_ERRORS = ("cancelled", "unreachable")
BATCH_S = 2.0  # requests scheduled in the same two wall seconds form one batch: as long as a
#               connection keeps its flow queue in the slicing scenarios (docs/tolerances.md)


def service_row(records: list[dict[str, Any]], service: str, *, clock: ScenarioClock,
                duration_s: float, slo_ms: float) -> dict[str, Any]:
    """Metrics of one service in one cell. Latencies are in scenario time (the replica's own time
    scaled, the rest as measured: `ScenarioClock.scenario_ms_of`), so they compare with the SLO
    thresholds whatever the time-scale factor.

    records: the service's request records in the cell; service: its name; clock: the run's;
    duration_s: the cell's measured seconds; slo_ms: the SLO the violations count against."""
    ok_lat = [clock.scenario_ms_of(r) for r in records if r.get("error") is None]
    sched = [clock.scenario_ms_of(r) + clock.scenario(r["latency_sched_ms"] - r["latency_ms"])
             for r in records if r.get("error") is None]
    violations = sum(1 for r in records
                     if r.get("error") is not None or clock.scenario_ms_of(r) > slo_ms)
    # how late the clients sent, in scenario time: a time scale the machine does not hold shows here
    lags = (schedule_lag_ms(r) for r in records)
    lateness = [clock.scenario(lag) for lag in lags if lag is not None]
    n = len(records)
    errors = sum(1 for r in records if r.get("error") is not None)
    kinds: dict[str, int] = {}
    for r in records:
        if r.get("error"):
            kinds[r["error"]] = kinds.get(r["error"], 0) + 1
    return {
        "service": service,
        "requests": n,
        "errors": errors,
        "error_kinds": kinds,
        "violations": violations,
        "slo_violation_rate": violations / n if n else None,
        "mean_latency_ms": sum(ok_lat) / len(ok_lat) if ok_lat else None,
        "ok": len(ok_lat),
        "latency_sd_ms": statistics.stdev(ok_lat) if len(ok_lat) > 1 else None,
        "p50_latency_ms": percentile(ok_lat, 0.5),
        "p95_latency_ms": percentile(ok_lat, 0.95),
        "p99_latency_ms": percentile(ok_lat, 0.99),
        "mean_sched_latency_ms": sum(sched) / len(sched) if sched else None,
        "p99_lateness_ms": percentile(lateness, 0.99),
        "throughput_rps": (n - errors) / duration_s if duration_s else None,
        **batch_se(records, clock=clock, slo_ms=slo_ms),
        "bytes_up": sum(r.get("bytes_up", 0) for r in records),
        "bytes_down": sum(r.get("bytes_down", 0) for r in records),
    }


def batch_se(records: list[dict[str, Any]], *, clock: ScenarioClock, slo_ms: float,
             batch_s: float = BATCH_S) -> dict[str, Any]:
    """Standard errors of the SLO violation rate and the mean latency by batch means: requests
    scheduled in the same `batch_s` wall seconds form a batch, and the estimate's variance is
    that of a ratio of the batches' sums (K/(K-1) sum_j (y_j - est * n_j)^2 / (sum_j n_j)^2), so
    that requests sharing a fate (a connection, a queue, a second of congestion) are not counted
    as independent. None with fewer than 2 batches.

    records: the cell's request records of one service; clock: the run's (latencies are
    scenario time); slo_ms: the service's SLO; batch_s: the batch's length in wall seconds."""
    batches: dict[int, list[float]] = {}  # batch -> [requests, violations, ok, latency sum]
    for r in records:
        b = batches.setdefault(int(r.get("scheduled", 0.0) // batch_s), [0, 0, 0, 0.0])
        ok = r.get("error") is None
        lat = clock.scenario_ms_of(r) if ok else 0.0
        b[0] += 1
        b[1] += (not ok) or lat > slo_ms
        b[2] += ok
        b[3] += lat
    out: dict[str, Any] = {"batches": len(batches), "slo_violation_batch_se": None,
                           "mean_latency_batch_se_ms": None}
    if len(batches) < 2:
        return out
    vals = list(batches.values())
    out["slo_violation_batch_se"] = _ratio_se([b[1] for b in vals], [b[0] for b in vals])
    out["mean_latency_batch_se_ms"] = _ratio_se([b[3] for b in vals], [b[2] for b in vals])
    return out


def _ratio_se(ys: list[float], ns: list[float]) -> float | None:
    """The linearised standard error of sum(ys) / sum(ns) over K clusters."""
    total = sum(ns)
    if not total:
        return None
    est, k = sum(ys) / total, len(ns)
    return (k / (k - 1) * sum((y - est * n) ** 2 for y, n in zip(ys, ns, strict=True))) ** 0.5 / total


def lost_requests(records: list[dict[str, Any]], planned: int | None) -> int | None:
    """Requests of a client schedule (`planned`) that the service never got to answer: never
    recorded (the client died, was killed with its namespace, or stopped early) or recorded as
    one of LOST_ERRORS. A slow, failing or dropping service loses none: those are its answers.
    None when the plan was not recorded (runs before it was).

    records: the client's request records."""
    if planned is None:
        return None
    return max(0, planned - len(records)) + sum(1 for r in records if r.get("error") in LOST_ERRORS)


# At a time scale, clients whose p99 lateness (scenario time) exceeds this share of their service's
# SLO show a machine that does not hold the scale: the cell fails (bench/time_scale.py measured it)
LATENESS_SLO_SHARE = 0.1
# ... judged on at least this many requests: in a cell of fewer than 300 a p99 is its latest one or
# two, and two stalls of a busy machine (a neighbour's namespaces torn down) would decide it; a
# machine that does not hold the scale makes many requests late. There the 3rd-latest is judged.
MIN_LATE_REQUESTS = 3
# how a cell's problem line for it begins, after the service's name (a re-run drops those lines)
FELL_BEHIND = "the clients fell behind their schedule"


def behind_schedule(records: list[dict[str, Any]], *, clock: ScenarioClock, slo_ms: float
                    ) -> float | None:
    """The lateness (scenario ms) of a service's requests when it exceeds LATENESS_SLO_SHARE of its
    SLO at a time scale other than 1, else None: the machine did not hold the time scale. The
    lateness is the p99 over 300 requests or more, else the MIN_LATE_REQUESTS-th latest one's.

    records: the service's request records; clock: the run's; slo_ms: the service's SLO."""
    if clock.real_time:
        return None
    return late_beyond_bound([clock.scenario(lag) for lag in map(schedule_lag_ms, records)
                              if lag is not None], slo_ms=slo_ms)


def late_beyond_bound(lags_ms: list[float], *, slo_ms: float) -> float | None:
    """`behind_schedule`'s rule on the lateness of a service's requests (scenario ms, in any
    order): the p99 over 300 requests or more, else the MIN_LATE_REQUESTS-th latest one's, when it
    exceeds LATENESS_SLO_SHARE of the SLO; else None (the live page judges a cell so far by it).

    lags_ms: each request's lateness; slo_ms: the service's SLO."""
    lags = sorted(lags_ms)
    if not lags:
        return None
    late = (percentile(lags, 0.99) if len(lags) * 0.01 >= MIN_LATE_REQUESTS
            else lags[-min(MIN_LATE_REQUESTS, len(lags))])
    return late if late is not None and late > LATENESS_SLO_SHARE * slo_ms else None


def behind_cells(run_dir: Path) -> dict[str, dict[str, float]]:
    """The cells (slug/rep) of `run_dir` that failed because their clients fell behind: each one's
    p99 lateness per service (scenario ms), from its cell.json's `behind_schedule`."""
    out = {}
    for p in sorted(run_dir.glob("cells/*/rep-*/cell.json")):
        info = json.loads(p.read_text())
        # "behind": the machine's (since its own status); "failed" with lateness: a run before it
        if info.get("status") in ("behind", "failed") and info.get("behind_schedule"):
            out[f"{p.parent.parent.name}/{p.parent.name}"] = info["behind_schedule"]
    return out


def read_records(cell_dir: Path, warmup: dict[str, int] | None = None
                 ) -> dict[str, list[dict[str, Any]]]:
    """The cell's request records by service, from every client's requests/*.jsonl; with
    `warmup` (client file name -> its first requests that fell in the warm-up, the cell's
    `warmup_requests`) only the measured ones.

    cell_dir: a cell repetition's directory."""
    records: dict[str, list[dict[str, Any]]] = {}
    for f in sorted((cell_dir / "requests").glob("*.jsonl")):
        first = (warmup or {}).get(f.name, 0)
        for r in read_jsonl(f):
            if not first or r["seq"] > first:  # the client numbers them from 1 in schedule order
                records.setdefault(r["service"], []).append(r)
    return records


def _slo_ms(info: dict[str, Any], service: str) -> float:
    """The cell's SLO of `service` (its scenario's profiles), else the registry's: a service of
    the scenario's own profile file is only in the former."""
    slo = info.get("slo_ms", {}).get(service)
    return float(slo) if slo is not None else SLO_MS[service]


def cell_rows(cell_dir: Path) -> list[dict[str, Any]]:
    """Rows for one repetition of one cell, from its files.

    cell_dir: a cell repetition's directory (cell.json, requests/, samples, decisions)."""
    info = json.loads((cell_dir / "cell.json").read_text())
    # a `service` matrix key picks the service: it names rows' services, it is not a row label
    params = {k: v for k, v in info["params"].items() if k not in ("service", "slice")}
    # matrix_params: which of the row's keys are the cell's parameters (the rest are figures)
    base = {**params, "cell": info["slug"], "rep": info["rep"], "status": info.get("status"),
            "matrix_params": list(params)}
    if info.get("engine") == "sim":
        return sim_rows(cell_dir, info, base)
    clock = ScenarioClock(info.get("time_scale", 1.0))
    duration_s = info.get("measured_s") or info.get("duration_s") or 0.0
    # the whole cell's requests say what it lost; the measured ones (after the scenario's
    # `warmup_s`) are its results, as are the samples, decisions and probes not marked warm-up
    every = read_records(cell_dir)
    records = read_records(cell_dir, info.get("warmup_requests", {}))
    planned = info.get("planned_requests", {})
    samples = _measured(read_jsonl(cell_dir / "samples.jsonl"))
    every_decision = read_jsonl(cell_dir / "decisions.jsonl")
    decisions = _measured(every_decision)
    probes = _measured(read_jsonl(cell_dir / "replicas.jsonl"))
    rows = []
    for service in info.get("services", sorted(every)):
        row = {**base, **service_row(records.get(service, []), service, clock=clock,
                                     duration_s=duration_s,
                                     slo_ms=_slo_ms(info, service))}
        row["warmup_requests"] = len(every.get(service, [])) - row["requests"]
        row["planned_requests"] = planned.get(service)
        row["lost_requests"] = lost_requests(every.get(service, []), planned.get(service))
        ready = [s["ready"] for s in samples if s.get("service") == service]
        row["mean_replicas"] = sum(ready) / len(ready) if ready else None
        rewards = [d["reward"] for d in decisions if d.get("service") == service]
        row["reward"] = sum(rewards) / len(rewards) if rewards else None
        row["decisions"] = len(rewards)
        row.update(replica_row([p for p in probes if p.get("service") == service],
                               # a target set in the warm-up is what the replicas then run
                               [d for d in every_decision if d.get("service") == service]))
        rows.append(row)
    for f in sorted((cell_dir / "iperf").glob("*.json")):
        try:
            raw = json.loads(f.read_text())
        except json.JSONDecodeError:
            continue
        mbit = raw.get("end", {}).get("sum_received", {}).get("bits_per_second")
        slice_name, _, direction = f.stem.partition("-")
        rows.append({**base, "slice": slice_name, "direction": direction,
                     "iperf_goodput_mbit": mbit / 1e6 if mbit is not None else None,
                     "iperf_error": raw.get("error")})
    return rows


def _measured(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if not r.get("warmup")]


def _same(a: Any, b: Any) -> bool:
    return isinstance(a, int | float) and isinstance(b, int | float) and abs(a - b) < 1e-6


def replica_row(probes: list[dict[str, Any]], decisions: list[dict[str, Any]]) -> dict[str, Any]:
    """What the replicas of one service reported at each scaler period (replicas.jsonl) against
    what the cluster set for them (config_mismatches: share, batch or interference stretch
    differ, or the replica did not answer) and against the policy's last applied target
    (target_mismatches: share or batch differ; only for policies that set targets).

    probes: the service's replicas.jsonl lines; decisions: its decisions.jsonl lines."""
    answered = [p for p in probes if "error" not in p]

    def mean(key: str) -> float | None:
        vals = [p[key] for p in answered if isinstance(p.get(key), int | float)]
        return sum(vals) / len(vals) if vals else None

    config = sum(1 for p in probes if "error" in p or not all(
        _same(p.get(k), p.get(f"{k}_set")) for k in ("share", "batch", "stretch")))
    targets = sorted((d["t"], d["target"]) for d in decisions if d.get("target") and "t" in d)
    checked = wrong = 0
    for p in answered:
        before = [tg for t, tg in targets if t < p["t"] - 1e-6]
        if before:
            checked += 1
            wrong += not (_same(p.get("share"), before[-1]["share_pct"])
                          and _same(p.get("batch"), before[-1]["batch"]))
    stretches = [p["stretch"] for p in answered if isinstance(p.get("stretch"), int | float)]
    return {
        "replica_probes": len(probes),
        "config_mismatches": config if probes else None,
        "target_mismatches": wrong if checked else None,
        "mean_share_pct": mean("share"),
        "mean_batch": mean("batch"),
        "mean_stretch": mean("stretch"),
        "max_stretch": max(stretches) if stretches else None,
    }


def sim_rows(cell_dir: Path, info: dict[str, Any], base: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of a simulated cell: the simulator's per-service figures.

    cell_dir: the cell's directory (sim.json); info: its cell.json; base: the fields every row of
    the cell carries."""
    sim = json.loads((cell_dir / "sim.json").read_text()) if (cell_dir / "sim.json").exists() else {}
    rows = []
    for service, r in sim.items():
        rows.append({**base, "service": service, "engine": "sim",
                     "policy": info.get("policies", {}).get(service, r.get("policy")),
                     "total_units": info.get("total_units"),
                     "ratio": info.get("ratios", {}).get(service),
                     "slo_violation_rate": r["slo_violation_rate"], "mean_replicas": r["instances"],
                     "mean_latency_ms": r["proc_time"] * 1000.0, "reward": r["reward"],
                     **{k: r.get(k) for k in ("p50_latency_ms", "p95_latency_ms", "p99_latency_ms")},
                     "steps_per_second": r.get("steps_per_second"), "requests": None,
                     "errors": None, "measure": info.get("measure", DEFAULT_MEASURE)})
    chains = cell_dir / "chains.json"
    for c in json.loads(chains.read_text()) if chains.exists() else []:
        rows.append({**base, "pipeline": c["pipeline"], "engine": "sim", "sla_ms": c["sla_ms"],
                     "requests": c["requests"], "completed": c["completed"], "late": c["late"],
                     "dropped": c["dropped"], "on_time": c["on_time"],
                     "chain_violation_rate": c["violation_rate"], "mean_e2e_ms": c["mean_e2e_ms"],
                     "p99_e2e_ms": c["p99_e2e_ms"], "on_time_rps": c["on_time_rps"]})
    return rows


RECORD = "results.json"  # a finished run's record: rows, verdicts, interrupted, problems


def read_record(run_dir: Path) -> dict[str, Any]:
    """A finished run's record (RECORD), which the report, `testbed judge` and `reproduce` read
    rather than recompute; StateError in one line when it is missing or not one.

    run_dir: a run directory."""
    path = Path(run_dir) / RECORD
    if not path.is_file():
        raise StateError(f"{run_dir}: no {RECORD} (not a finished run directory)")
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StateError(f"{path}: not JSON ({exc})") from None
    if not isinstance(record, dict) or not isinstance(record.get("rows"), list):
        raise StateError(f"{path}: no 'rows' list (a {RECORD} of testbed run has one)")
    return record


def recorded_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of the run in `run_dir`: its record's (RECORD), else, for a run directory without
    one (written before records were, or cut short), read from its cells' files (`run_rows`)."""
    try:
        return read_record(run_dir)["rows"]
    except StateError:
        return run_rows(run_dir)


def run_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Every cell's rows of the run in `run_dir`, read from the cells' files (what results.json
    records)."""
    rows = []
    for cell_json in sorted((run_dir / "cells").glob("*/rep-*/cell.json")):
        rows += cell_rows(cell_json.parent)
    return rows
