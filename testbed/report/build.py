"""Builds a run's report from its directory alone: manifest, cell files and results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.errors import StateError
from testbed.judge.outcome import Outcome, evaluate_all, recorded_outcomes
from testbed.judge.verdict import Verdict, run_verdict
from testbed.profiles.paper import (
    FIG_5_7_5_8,
    FIG_5_7_5_8_SOURCE,
    FIG_5_7_5_8_VALUES,
    FIG_FLOWS,
    PAPER_POLICY,
    PAPER_TABLES,
    SLICING_SETUP,
    TABLE_5_4,
)
from testbed.report import netplot, plots
from testbed.report.document import Document, Section, TableData
from testbed.report.host import host_section
from testbed.report.what_was_run import what_was_run
from testbed.scenario.results import RECORD, read_record, run_rows
from testbed.scenario.rundir import read_jsonl


def _f(v: Any, digits: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _rate(v: Any) -> str:
    return "–" if v is None else f"{v:.4f}"


def build_document(run_dir: Path) -> Document:
    run_dir = Path(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    scn = manifest["scenario"]
    try:  # the run's record; a run directory from before it was written: judged here
        record: dict[str, Any] | None = read_record(run_dir)
    except StateError:
        record = None
    rows = record["rows"] if record else run_rows(run_dir)
    outcomes = recorded_outcomes(record, scn.get("expect", [])) or evaluate_all(
        scn.get("expect", []), rows)
    plots_dir = run_dir / "plots"
    plots_dir.mkdir(exist_ok=True)
    doc = Document(f"Scenario {scn['name']}")

    doc.sections.append(_run_section(manifest))
    cells = [json.loads(f.read_text()) for f in sorted((run_dir / "cells").glob("*/rep-*/cell.json"))]
    doc.sections.append(what_was_run(manifest, cells))
    verdict = run_verdict(outcomes, rows, interrupted=bool(record and record.get("interrupted")))
    doc.sections.append(_expectations_section(verdict, outcomes))
    problems = _problems(run_dir)
    if problems:
        doc.sections.append(Section("Problems during the run", bullets=problems))
    host = host_section(cells)
    if host is not None:
        doc.sections.append(host)

    svc = [r for r in rows if "service" in r and r.get("engine") != "sim"]
    simulated = [r for r in rows if r.get("engine") == "sim" and "service" in r]
    if simulated:
        doc.sections.append(_sim_results(simulated))
        tables = _paper_tables(simulated)
        if tables:
            doc.sections.append(tables)
    chains = [r for r in rows if r.get("engine") == "sim" and "pipeline" in r]
    if chains:
        doc.sections.append(_chain_results(chains))
    if svc:
        doc.sections.append(_service_results(svc, rows, plots_dir))
    probed = [r for r in svc if r.get("replica_probes")]
    if probed:
        doc.sections.append(_replica_reports(probed))
    ip = [r for r in rows if r.get("iperf_goodput_mbit") is not None or r.get("iperf_error")]
    if ip:
        doc.sections.append(_cross_traffic(ip, rows, plots_dir))

    if "slicing" in scn.get("matrix", {}) and "iperf_flows" in scn.get("matrix", {}):
        doc.sections.append(_slicing_section(svc, plots_dir, rows, run_dir))
    if "policy" in scn.get("matrix", {}):
        doc.sections.append(_table_5_4(svc))
    sim = _sim_section(run_dir, svc)
    if sim:
        doc.sections.append(sim)
    over_time = _over_time(run_dir, plots_dir)
    if over_time.images:
        doc.sections.append(over_time)
    return doc


def _run_section(manifest: dict[str, Any]) -> Section:
    scn = manifest["scenario"]
    about = Section("Run")
    if scn.get("description"):
        about.paragraphs.append(scn["description"].strip())
    about.bullets += [
        f"source `{manifest['source']}`, profile {manifest['profile']}, created {manifest['created']}",
        f"commit `{manifest.get('commit')}`, seed {scn.get('seed')}, "
        f"time scale {scn.get('time_scale')}"
        + (", replicas sleeping their profile's time (replica_work: sleep)"
           if scn.get("replica_work") == "sleep" else "")
        + f", {scn.get('duration_s')} s per cell, "
        f"{scn.get('repetitions')} repetition(s)",
        f"host {manifest['host'].get('hostname')} ({manifest['host'].get('cpus')} CPUs, "
        f"kernel {manifest['host'].get('kernel')}, Python {manifest['host'].get('python')})",
        "latencies are in scenario time (the replicas' own time × time scale, the network's as "
        "measured) and measured from send time; "
        "'sched' latency is measured from the scheduled time and shows client lateness",
    ]
    if manifest.get("overrides"):
        about.bullets.append(f"command-line overrides: {manifest['overrides']}")
    return about


def run_verdict_line(verdict: Verdict) -> str:
    """The run's verdict as the report states it: the word `testbed run` printed and exited on,
    and what decided it (failed cells, interrupted).

    verdict: testbed.judge.verdict.run_verdict's."""
    why = [f"failed cell(s): {', '.join(verdict.failed_cells)}"] if verdict.failed_cells else []
    if verdict.behind_cells:
        why.append(f"the machine fell behind in: {', '.join(verdict.behind_cells)}")
    if verdict.interrupted:
        why.append("the run was interrupted")
    return f"Run verdict: **{verdict.verdict}**" + (f" ({'; '.join(why)})" if why else "")


def _expectations_section(verdict: Verdict, outcomes: list[Outcome]) -> Section:
    sec = Section("Expectations", paragraphs=[run_verdict_line(verdict)])
    if not outcomes:
        return sec
    sec.tables.append(TableData(["check", "result", "left", "right", "why"], [
        [f"`{o.text}`", f"**{o.verdict}**", _f(o.left, 4), _f(o.right, 4),
         o.detail + (f"; decided by: {o.decided_by}" if o.decided_by else "")]
        for o in outcomes]))
    return sec


def _service_results(svc: list[dict[str, Any]], rows: list[dict[str, Any]], plots_dir: Path
                     ) -> Section:
    sec = Section("Results per cell")
    sec.tables.append(TableData(
        ["cell", "rep", "service", "requests", "errors", "SLO viol.", "mean ms", "p50 ms",
         "p99 ms", "sched mean ms", "req/s ok", "replicas", "reward"],
        [[r["cell"], str(r["rep"]), r["service"], str(r["requests"]), str(r["errors"]),
          _rate(r["slo_violation_rate"]), _f(r["mean_latency_ms"]), _f(r["p50_latency_ms"]),
          _f(r["p99_latency_ms"]), _f(r["mean_sched_latency_ms"]), _f(r["throughput_rps"], 2),
          _f(r.get("mean_replicas"), 2), _f(r.get("reward"), 4)] for r in svc]))
    bars = plots.service_bars(rows, plots_dir)
    if bars:
        sec.images.append(bars)
    return sec


def _replica_reports(probed: list[dict[str, Any]]) -> Section:
    sec = Section("Replicas as they ran", paragraphs=[
        "What the replicas reported once per scaler period: MPS share, batch size and "
        "interference stretch (1 + InSS's term for their neighbours on the emulated GPU); "
        "mismatches against what the cluster set and against the policy's last target."])
    sec.tables.append(TableData(
        ["cell", "rep", "service", "reports", "share %", "batch", "stretch", "max stretch",
         "vs cluster", "vs target"],
        [[r["cell"], str(r["rep"]), r["service"], str(r["replica_probes"]),
          _f(r.get("mean_share_pct"), 1), _f(r.get("mean_batch"), 2), _f(r.get("mean_stretch"), 3),
          _f(r.get("max_stretch"), 3), _f(r.get("config_mismatches"), 0),
          _f(r.get("target_mismatches"), 0)] for r in probed]))
    return sec


def _cross_traffic(ip: list[dict[str, Any]], rows: list[dict[str, Any]], plots_dir: Path
                   ) -> Section:
    sec = Section("Cross-traffic (iperf3)")
    sec.tables.append(TableData(["cell", "rep", "slice", "direction", "goodput Mbit/s"], [
        [r["cell"], str(r["rep"]), r["slice"], r["direction"],
         _f(r.get("iperf_goodput_mbit"), 2) if not r.get("iperf_error")
         else f"error: {r['iperf_error']}"] for r in ip]))
    img = plots.iperf_bars(rows, plots_dir)
    if img:
        sec.images.append(img)
    return sec


def _over_time(run_dir: Path, plots_dir: Path) -> Section:
    """Time-series plots of each cell's first repetition (no images: nothing to show)."""
    ts = Section("Over time")
    for cell_json in sorted((run_dir / "cells").glob("*/rep-0/cell.json")):
        info = json.loads(cell_json.read_text())
        img = plots.timeseries(cell_json.parent, plots_dir, cell_json.parent.parent.name,
                               title=f"cell {info.get('label', cell_json.parent.parent.name)}, "
                                     f"rep {info.get('rep', 0) + 1}")
        if img:
            ts.images.append(img)
        net = netplot.slice_throughput(cell_json.parent, plots_dir, cell_json.parent.parent.name,
                                       title=f"cell {info.get('label', cell_json.parent.parent.name)}"
                                             f", rep {info.get('rep', 0) + 1}: the network")
        if net:
            ts.images.append(net)
    if ts.images:
        ts.paragraphs.append("Ready replicas and arrivals per sample; latency (p50, p99) and "
                             "the share of requests that violated their SLO per time bucket, by "
                             "send time, in scenario time (first repetition of each cell). "
                             "Where the cell sampled its network: each slice's throughput per "
                             "direction (HTB counters, every second) beside the services' latency.")
    return ts


def _sim_results(rows: list[dict[str, Any]]) -> Section:
    sec = Section("Results per cell (simulator)")
    sec.tables.append(TableData(
        ["cell", "rep", "service", "policy", "units", "ratio", "SLO viol.", "instances",
         "proc. time s", "reward", "steps/s"],
        [[r["cell"], str(r["rep"]), r["service"], str(r.get("policy")), str(r.get("total_units")),
          _f(r.get("ratio"), 2), _rate(r["slo_violation_rate"]), _f(r["mean_replicas"], 3),
          _f(r["mean_latency_ms"] / 1000, 4), _f(r["reward"], 4),
          _f(r.get("steps_per_second"), 0)] for r in rows]))
    return sec


def _chain_results(rows: list[dict[str, Any]]) -> Section:
    sec = Section("Routed pipelines (simulator)")
    sec.tables.append(TableData(
        ["cell", "rep", "pipeline", "SLA ms", "requests", "chain viol.", "late", "dropped",
         "end to end mean ms", "p99 ms", "req/s in SLA"],
        [[r["cell"], str(r["rep"]), r["pipeline"], _f(r["sla_ms"], 0), str(r["requests"]),
          _rate(r["chain_violation_rate"]), str(r["late"]), str(r["dropped"]),
          _f(r["mean_e2e_ms"]), _f(r["p99_e2e_ms"]), _f(r["on_time_rps"], 2)] for r in rows]))
    sec.paragraphs.append(
        "Each request a stage completes arrives at the next stage at its finish time; a violation "
        "is a request late against the pipeline's SLA (first arrival to last finish) or dropped at "
        "any stage. The local testbed's replicas do not forward requests.")
    return sec


def _paper_tables(rows: list[dict[str, Any]]) -> Section | None:
    """Tables 5.1–5.3 beside ours, for cells whose units and ratios match a paper table."""
    sec = Section("Beside the paper: Tables 5.1–5.3 (simulator)")
    for key in ("5.1", "5.2", "5.3"):
        table = PAPER_TABLES[key]
        mine = [r for r in rows if r.get("total_units") == table.total_units
                and r.get("ratio") is not None
                and abs(r["ratio"] - table.ratios.get(r["service"], -1)) < 1e-9]
        if not mine:
            continue
        out = []
        for policy, paper_name in PAPER_POLICY.items():
            for service, ref in table.results.get(paper_name, {}).items():
                ours = [r for r in mine if r["service"] == service and r.get("policy") == policy]
                if not ours:
                    continue

                def m(metric: str, ours: list[dict[str, Any]] = ours) -> float:
                    return sum(r[metric] for r in ours) / len(ours)
                reward = m("reward")
                out.append([service, policy, _rate(m("slo_violation_rate")),
                            _rate(ref.slo_violation_rate), _f(m("mean_replicas"), 3),
                            _f(ref.instances, 3), _f(m("mean_latency_ms") / 1000, 4),
                            _f(ref.proc_time_s, 4), _f(reward, 4), _f(ref.reward, 4),
                            f"{(reward - ref.reward) / abs(ref.reward):+.1%}"])
        if out:
            sec.tables.append(TableData(
                ["service", "policy", "SLO viol. ours", "paper", "instances ours", "paper",
                 "proc. time s ours", "paper", "reward ours", "paper", "reward diff"], out,
                f"{table.name}: {table.total_units} units, ratios "
                + ", ".join(f"{k} {v:g}" for k, v in table.ratios.items())))
    return sec if sec.tables else None


def _problems(run_dir: Path) -> list[str]:
    out = []
    for cell_json in sorted((run_dir / "cells").glob("*/rep-*/cell.json")):
        info = json.loads(cell_json.read_text())
        where = f"{info['slug']} rep {info['rep']}"
        if info.get("status") != "ok":
            out.append(f"{where}: status {info.get('status')}")
        out += [f"{where}: {p}" for p in info.get("problems", [])]
        for ev in read_jsonl(cell_json.parent / "events.jsonl"):
            if ev.get("kind") in ("died", "replaced", "failed_to_start"):
                out.append(f"{where}: replica {ev.get('replica')} of {ev.get('service')} "
                           f"{ev['kind']} {ev.get('detail', '')}".rstrip())
    results = run_dir / RECORD
    if results.exists() and json.loads(results.read_text()).get("interrupted"):
        out.append("the run was interrupted (Ctrl-C); the results cover what was collected")
    return list(dict.fromkeys(out))


def _slicing_section(svc: list[dict[str, Any]], plots_dir: Path, rows: list[dict[str, Any]],
                     run_dir: Path) -> Section:
    sec = Section("Beside the paper: Figs 5.7 / 5.8 (effect of network slicing)")
    sec.paragraphs.append(f"Paper setup: {SLICING_SETUP}. The dissertation plots these figures "
                          "without printing their values (they are in the script that drew them, "
                          f"{FIG_5_7_5_8_SOURCE}); its stated result is:")
    sec.bullets += FIG_5_7_5_8
    table_rows = []
    for service in sorted({r["service"] for r in svc}):
        for flows in sorted({r["iperf_flows"] for r in svc if r["service"] == service}):
            def pick(slicing: bool, metric: str, service: str = service,
                     flows: int = flows) -> float | None:
                vals = [r[metric] for r in svc if r["service"] == service
                        and r["iperf_flows"] == flows and bool(r["slicing"]) == slicing
                        and r.get(metric) is not None]
                return sum(vals) / len(vals) if vals else None
            table_rows.append([service, str(flows),
                               _rate(pick(False, "slo_violation_rate")),
                               _rate(pick(True, "slo_violation_rate")),
                               _f(pick(False, "mean_latency_ms")),
                               _f(pick(True, "mean_latency_ms")),
                               f"{_f(pick(False, 'p50_latency_ms'))} / "
                               f"{_f(pick(False, 'p99_latency_ms'))}",
                               f"{_f(pick(True, 'p50_latency_ms'))} / "
                               f"{_f(pick(True, 'p99_latency_ms'))}"])
    sec.tables.append(TableData(["service", "iperf3 flows", "SLO viol. no slice",
                                 "SLO viol. with slice", "mean ms no slice", "mean ms with slice",
                                 "p50 / p99 ms no slice", "p50 / p99 ms with slice"],
                                table_rows, "Ours, in the layout of Figs 5.7/5.8"))
    beside = beside_the_figures(svc)
    if beside:
        sec.tables.append(beside)
    sec.images += plots.slicing_bars(rows, plots_dir)
    sec.images += plots.latency_cdfs(run_dir, plots_dir)
    return sec


def beside_the_figures(svc: list[dict[str, Any]]) -> TableData | None:
    """Ours (result rows of a slicing run) beside the values behind Figs 5.7/5.8, where both have
    the cell: each mean as its ratio without/with the slice (our services' own times differ from
    the paper's), rates as they are."""
    out = []
    for series in FIG_5_7_5_8_VALUES:
        for flows in FIG_FLOWS:
            ours = {on: [r[series.metric] for r in svc if r["service"] == series.service
                         and r["iperf_flows"] == flows and bool(r["slicing"]) == on
                         and r.get(series.metric) is not None] for on in (False, True)}
            if not (ours[False] and ours[True]):
                continue
            off, on = (sum(v) / len(v) for v in (ours[False], ours[True]))
            if series.metric == "mean_latency_ms":
                what = "mean, without / with the slice"
                mine = _f(off / on, 2) if on else "–"
                theirs = _f(series.value(False, flows) / series.value(True, flows), 2)
            else:
                what = "SLO violation rate without / with the slice"
                mine = f"{_rate(off)} / {_rate(on)}"
                theirs = f"{_rate(series.value(False, flows))} / {_rate(series.value(True, flows))}"
            out.append([series.service, str(flows), what, mine, theirs])
    if not out:
        return None
    return TableData(["service", "iperf3 flows", "figure", "ours", "paper's figure"], out,
                     f"Beside the values behind Figs 5.7/5.8 ({FIG_5_7_5_8_SOURCE})")


def _table_5_4(svc: list[dict[str, Any]]) -> Section:
    sec = Section("Beside the paper: Table 5.4 (DRL vs rule-based on the testbed)")
    out_rows = []
    for service, by_policy in TABLE_5_4.items():
        for policy, paper in by_policy.items():
            mine = [r for r in svc if r["service"] == service and r.get("policy") == policy]

            def mean(metric: str, mine: list[dict[str, Any]] = mine) -> float | None:
                vals = [r[metric] for r in mine if r.get(metric) is not None]
                return sum(vals) / len(vals) if vals else None
            lat = mean("mean_latency_ms")
            out_rows.append([service, policy,
                             _rate(mean("slo_violation_rate")), _rate(paper["slo_violation_rate"]),
                             _f(mean("mean_replicas"), 3), _f(paper["instances"], 3),
                             _f(lat / 1000 if lat is not None else None, 4),
                             _f(paper["proc_time_s"], 4),
                             _f(mean("reward"), 4), _f(paper["reward"], 4)])
    sec.tables.append(TableData(["service", "policy", "SLO viol. ours", "paper", "instances ours",
                                 "paper", "proc. time s ours", "paper", "reward ours", "paper"],
                                out_rows))
    sec.paragraphs.append("The paper's DRL column is a Maskable PPO policy ('ppo'); its "
                          "rule-based column used the Table 4.10 thresholds ('rule_v2').")
    return sec


def _sim_section(run_dir: Path, svc: list[dict[str, Any]]) -> Section | None:
    files = sorted((run_dir / "sim").glob("*.json")) if (run_dir / "sim").is_dir() else []
    if not files:
        return None
    sec = Section("Simulator beside the testbed (the sim-to-testbed premise)")
    table = []
    for f in files:
        sim = json.loads(f.read_text())
        for service, s in sim.get("services", {}).items():
            mine = [r for r in svc if r["cell"] == sim["cell"] and r["service"] == service]
            if not mine:
                continue
            t_slo = sum(r["slo_violation_rate"] or 0 for r in mine) / len(mine)
            t_inst = [r["mean_replicas"] for r in mine if r.get("mean_replicas") is not None]
            t_lat = [r["mean_latency_ms"] for r in mine if r.get("mean_latency_ms") is not None]
            t_inst_v = sum(t_inst) / len(t_inst) if t_inst else None
            t_lat_v = sum(t_lat) / len(t_lat) if t_lat else None
            table.append([sim["cell"], service,
                          _rate(s["slo_violation_rate"]), _rate(t_slo),
                          _rate(t_slo - s["slo_violation_rate"]),
                          _f(s["instances"], 2), _f(t_inst_v, 2),
                          _f(t_inst_v - s["instances"], 2) if t_inst_v is not None else "–",
                          _f(s["proc_time"] * 1000, 0), _f(t_lat_v, 0),
                          _f(t_lat_v - s["proc_time"] * 1000, 0) if t_lat_v is not None else "–"])
    sec.tables.append(TableData(["cell", "service", "SLO viol. sim", "testbed", "Δ",
                                 "instances sim", "testbed", "Δ", "latency ms sim", "testbed",
                                 "Δ"], table))
    return sec


def write_report(run_dir: Path) -> tuple[Path, Path]:
    run_dir = Path(run_dir)
    doc = build_document(run_dir)
    md = run_dir / "report.md"
    md.write_text(doc.markdown(run_dir))
    page = run_dir / "report.html"
    page.write_text(doc.html())
    return md, page
