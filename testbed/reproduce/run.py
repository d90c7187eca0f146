"""`testbed reproduce`: run the chosen artefacts, judge each against the paper, write one report.

    result = reproduce(select(["fig5.7", "table5.1"]), Options(quick=True))

Checks run first (artefacts, traces, models, the drl extra, root): bad input writes nothing. The
work goes into `<out>.partial/` and is renamed to `<out>/` only when the report is written, so a
directory without `.partial` always holds a finished report. Each finished artefact's verdict is
kept in `<out>.partial/done/`: the same command with the same `--out` resumes after the last
finished artefact (the options must be the same; they are kept in `options.json`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from testbed.config.yamlfile import load_yaml_file
from testbed.errors import StateError
from testbed.judge.outcome import FAIL, NOT_RUN, PASS, UNDECIDED
from testbed.judge.verdict import NOT_JUDGED, run_verdict
from testbed.paths import stamped
from testbed.profiles.paper import FIGURE_SERVICES
from testbed.reproduce.artefacts import ARTEFACTS, Artefact, model_files, preflight
from testbed.reproduce.model import Options, ReproResult, Verdict
from testbed.reproduce.segments import (
    SEGMENT_WARMUP_S,
    T54_SEGMENT_S,
    lowered_time_scale,
    run_segments,
)
from testbed.reproduce.slicing import combine, judge_slicing
from testbed.reproduce.tables import (
    T54_DECIDES_ORDER_REPS,
    T54_DECIDES_ORDER_S,
    TableResult,
    sim_table,
    testbed_table,
)
from testbed.sim.measure import MEASURES

# the scenarios reproduce runs, shipped as package data (links to the repository's scenarios/)
SCENARIOS = Path(__file__).resolve().parent / "scenarios"
# Table 5.4's window of the test day: from 13:30, where the chatbot's and imgcls's loads move
# (shifts 0/8 h) and the simulator, run as the testbed runs, puts DRL and rule v2 0.02-0.04
# apart, 20 times the run-to-run noise; from 09:00 the chatbot idles at one replica and imgcls
# gets the same replicas under both policies (docs/table-5.4.md, `bench/table54_noise.py
# --sim-gaps`). TTS is idle at 13:30; its gap is largest at night: `--t54-start 21:00`.
T54_START_S = 48600
# the full size's window and repetitions are what decides DRL against rule v2 (tables.py's
# T54_DECIDES_ORDER_S and _REPS: 20 minutes, 2 repetitions)
T54_QUICK_S = 120
# --quick's window follows a warm-up of 4 scaler periods (the test day's 2 minutes before it,
# the scaler on, out of the results): without it the 2 minutes measured the replicas the load
# needs starting up, where DRL and rule v2 gave the same reward (docs/notes/table-5.4-runs.md, "CI size").
# The full size keeps none: its 20 minutes and the whole day are measured from the start.
T54_QUICK_WARMUP_S = 120


def default_out(quick: bool) -> Path:
    return stamped(f"reproduce{'-quick' if quick else ''}")


def reproduce(artefacts: list[Artefact], options: Options) -> ReproResult:
    preflight(artefacts, traces_dir=options.traces_dir, models_dir=options.models_dir,
              rule_only=options.rule_only)
    out = options.out or default_out(options.quick)
    if out.exists():
        raise StateError(f"{out} already exists: pass another --out or remove it")
    partial = out.with_name(out.name + ".partial")
    done = _resume(partial, options)
    started = time.monotonic()
    verdicts: list[Verdict] = []
    names = {a.name for a in artefacts}
    slicing_done: dict[str, Verdict] = {n: v for n, v in done.items()
                                        if n in ("fig5.7", "fig5.8")}
    if slicing_done and not all(n in slicing_done for n in names & {"fig5.7", "fig5.8"}):
        slicing_done = {}  # one slicing run decides both figures: rerun it for the missing one
    for a in artefacts:
        t0 = time.monotonic()
        if a.name in done and (a.kind != "slicing" or a.name in slicing_done):
            v = done[a.name]
            options.progress(f"{a.name}: {v.verdict} (resumed from {partial}/done)")
            verdicts.append(v)
            continue
        if a.kind == "slicing":
            if not slicing_done:
                slicing_done = _slicing(names, partial, options)
            v = slicing_done[a.name]
        elif a.kind == "sim-table":
            v = _sim(a, options)
        else:
            v = _table54(a, partial, options)
        v.seconds = v.seconds or time.monotonic() - t0
        verdicts.append(v)
        (partial / "done" / f"{a.name}.json").write_text(json.dumps(v.to_json(), default=str))
        options.progress(f"{a.name}: {v.verdict} ({v.summary})"
                         + (f"; decided by: {v.decided_by}" if v.decided_by else ""))
    result = ReproResult(out, verdicts, time.monotonic() - started)
    (partial / "verdicts.json").write_text(json.dumps(_jsonable(result), indent=1, default=str))
    from testbed.reproduce.document import write  # matplotlib: once every artefact has run

    write(result, partial, options)
    shutil.rmtree(partial / "done")  # what a resume would have needed: the report is whole now
    (partial / "options.json").unlink()
    os.replace(partial, out)
    result.out = out
    return result


def _resume(partial: Path, options: Options) -> dict[str, Verdict]:
    """The verdicts an interrupted run with the same options left in `partial`, or a new
    `partial` with none."""
    key = {"quick": options.quick, "rule_only": options.rule_only, "seed": options.seed,
           "traces": str(options.traces_dir), "models": str(options.models_dir),
           "t54": [options.t54_duration_s, options.t54_repetitions, options.t54_start_s,
                   options.t54_time_scale, options.t54_measure, options.t54_rule]}
    stamp = partial / "options.json"
    if partial.exists():
        if not stamp.is_file() or json.loads(stamp.read_text()) != key:
            raise StateError(f"{partial} is left from an interrupted run with other options: "
                             f"rerun with the same options to resume it, or remove it")
        return {p.stem: Verdict.from_json(json.loads(p.read_text()))
                for p in sorted((partial / "done").glob("*.json"))}
    (partial / "done").mkdir(parents=True)
    stamp.write_text(json.dumps(key))
    return {}


def resumed(run_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The --out and the Options fields of the interrupted reproduce in `run_dir` (its
    `<out>.partial` folder, or `<out>` itself), from its options.json; StateError when there is
    none to resume."""
    partial = run_dir if run_dir.name.endswith(".partial") else run_dir.with_name(
        run_dir.name + ".partial")
    stamp = partial / "options.json"
    if not stamp.is_file():
        raise StateError(f"{run_dir}: no interrupted reproduce to resume ({stamp} is missing)")
    key = json.loads(stamp.read_text())
    duration, reps, start, ts, *how = key["t54"]  # a run before 2026-12-02: the harness's way
    measure, rule = how or ("harness", "rule_v2")
    return partial.with_name(partial.name.removesuffix(".partial")), {
        "quick": key["quick"], "rule_only": key["rule_only"], "seed": key["seed"],
        "traces_dir": Path(key["traces"]), "models_dir": Path(key["models"]),
        "t54_duration_s": duration, "t54_repetitions": reps, "t54_start_s": start,
        "t54_time_scale": ts, "t54_measure": measure, "t54_rule": rule}


def _jsonable(result: ReproResult) -> dict[str, Any]:
    return {"seconds": result.seconds, "verdicts": [v.to_json() for v in result.verdicts]}


def _run(path: Path, partial: Path, options: Options, overrides: dict[str, Any] | None = None,
         *, text: str | None = None) -> tuple[Path, list[dict[str, Any]]]:
    # the scenario loader, runner and report: only for the artefacts that run a scenario (the
    # simulator's tables load none of them)
    from testbed.report import write_report
    from testbed.scenario.load import load_scenario, parse_scenario
    from testbed.scenario.runner import RunOptions, run_scenario

    loaded = (parse_scenario(text, str(path), path.parent) if text is not None
              else load_scenario(path, overrides))
    result = run_scenario(loaded, RunOptions(out_root=partial / "runs", progress=options.show_runs))
    write_report(result.run_dir)
    if result.interrupted:
        raise KeyboardInterrupt
    # named relative to the report folder: <out>.partial is renamed to <out> at the end
    return result.run_dir.relative_to(partial), result.rows


def _slicing(names: set[str], partial: Path, options: Options) -> dict[str, Verdict]:
    path = SCENARIOS / ("slicing-ci.yaml" if options.quick else "slicing.yaml")
    options.progress(f"Figs 5.7/5.8: running {path.name}")
    t0 = time.monotonic()
    run_dir, rows = _run(path, partial, options)
    out = slicing_verdicts(rows, str(run_dir), quick=options.quick)
    for v in out.values():
        v.seconds = time.monotonic() - t0
    return out


def judge_run_dir(run_dir: Path) -> dict[str, Verdict]:
    """Figs 5.7/5.8's verdicts on a finished slicing run directory (`testbed run` of
    slicing(-ci).yaml): the same checks, outcomes and words as that run's `expect:`."""

    scenario = json.loads((run_dir / "manifest.json").read_text())["scenario"]
    from testbed.scenario.results import recorded_rows  # a run directory's rows: this path only

    return slicing_verdicts(recorded_rows(run_dir), str(run_dir),
                            quick=scenario["name"] != "slicing")


def slicing_verdicts(rows: list[dict[str, Any]], run_dir: str, *, quick: bool
                     ) -> dict[str, Verdict]:
    """Fig 5.7 (imgcls) and Fig 5.8 (tts and the chatbot) from a slicing run's result rows, by
    `testbed.reproduce.slicing`'s judge."""

    flows = sorted({int(r["iperf_flows"]) for r in rows
                    if "service" in r and r.get("iperf_flows") is not None})
    judged = judge_slicing(rows, flows) if flows else {}
    cells: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if "service" not in r or r.get("mean_latency_ms") is None:
            continue
        key = f"{r['service']}|{int(r['iperf_flows'])}|{'on' if _on(r['slicing']) else 'off'}"
        c = cells.setdefault(key, {"mean_ms": [], "slo": []})
        c["mean_ms"].append(r["mean_latency_ms"])
        c["slo"].append(r["slo_violation_rate"])
    table = {k: {m: sum(v) / len(v) for m, v in c.items()} for k, c in cells.items()}
    out = {}
    for name, services in FIGURE_SERVICES.items():
        mine = {s: judged[s] for s in services if s in judged}
        outcomes = [o for s in mine.values() for o in s.outcomes]
        figure_rows = [r for r in rows if r.get("service") in services]
        verdict = combine(outcomes, figure_rows) if mine and len(mine) == len(services) else FAIL
        parts = [f"{s} {_SAID[sv.verdict]}" for s, sv in mine.items()]
        parts += [f"{s} not run (flows {flows})" for s in services if s not in mine]
        decided_by = "; ".join(dict.fromkeys(o.decided_by for o in outcomes if o.decided_by))
        if verdict == UNDECIDED and quick:
            decided_by += f"; {FULL_SIZE}"
        details = [f"{o.verdict} {o.text}: {o.explain()}" for o in outcomes if not o.passed]
        out[name] = Verdict(name, ARTEFACTS[name].title, verdict, ", ".join(parts), details,
                            run_dir=run_dir, slicing={"flows": flows, "cells": table},
                            decided_by=decided_by, outcomes=outcomes)
    return out


_SAID = {PASS: "as stated", FAIL: "differs", UNDECIDED: "not decided at this size"}
FULL_SIZE = ("the full size decides it: `testbed reproduce fig5.7` (slicing.yaml, 40 s cells at "
             "10/20/40 flows; docs/slicing.md gives the values it finds)")


def _on(v: Any) -> bool:
    return v is True or str(v).lower() in ("on", "true", "yes")


def _sim(a: Artefact, options: Options) -> Verdict:
    key = a.name.removeprefix("table")
    models = None if options.rule_only else options.models_dir
    # --quick: the whole day everywhere (under a minute at 128 units; the paper's figures are the
    # day's: the first 6 hours put TTS 81 % off them), without the oracle bound at 128 units
    # (the costly part)
    no_oracle = options.quick and key == "5.3"
    table = sim_table(key, traces_dir=options.traces_dir, models_dir=models, seed=options.seed,
                      oracle=not no_oracle, progress=options.progress)
    if no_oracle:
        table.notes.append("oracle bound not computed at --quick (`testbed reproduce table5.3` "
                           "computes it)")
    return _table_verdict(a, table, options)


def _table54(a: Artefact, partial: Path, options: Options) -> Verdict:
    import yaml


    duration = options.t54_duration_s or (T54_QUICK_S if options.quick else T54_DECIDES_ORDER_S)
    reps = options.t54_repetitions or (1 if options.quick else T54_DECIDES_ORDER_REPS)
    start = T54_START_S if options.t54_start_s is None else options.t54_start_s
    # the warm-up replays the trace before the window: none before the day's first minutes
    warmup = T54_QUICK_WARMUP_S if options.quick and start >= T54_QUICK_WARMUP_S else 0
    path = SCENARIOS / "slo-testbed.yaml"
    data = dict(load_yaml_file(path).data)
    models = model_files(options.models_dir.resolve())
    data["services"] = [
        {**s, "model": str(models[s["name"]])} if not options.rule_only
        else {k: v for k, v in s.items() if k != "model"} for s in data["services"]]
    data["traces_dir"] = str(options.traces_dir.resolve())
    ts = options.t54_time_scale
    if ts == "auto":
        ts = _auto_time_scale(path, data, start, duration, warmup, options)
    if ts != 1:  # the JPEG decoding cannot keep up at a time scale on a small machine
        data.update(time_scale=ts, replica_work="sleep")
    rule = options.t54_rule
    data.update(repetitions=reps, matrix={"policy": [rule] if options.rule_only else ["ppo", rule]},
                expect=[], markers=[], measure=options.t54_measure)
    window = (f"{duration:g} s of the test day from {start // 3600:02d}:{start % 3600 // 60:02d}, "
              f"{reps} repetition(s)"
              + (f", after a {warmup:g} s warm-up (not measured)" if warmup else "")
              + (f", at time scale {ts:g} (replicas sleeping their profile's time)"
                 if ts != 1 else "")
              + f", read {MEASURES[options.t54_measure].title}"
              + (f", the rule-based column run by {rule}" if rule != "rule_v2" else ""))
    options.progress(f"Table 5.4: {window}")
    # a checkpoint per segment of the window (the whole day: 24 one-hour runs), kept in partial
    run_dirs, rows = run_segments(
        data, start_s=start, duration_s=duration, warmup_s=warmup, partial=partial,
        progress=options.progress,
        run=lambda seg: _run(path, partial, options, text=yaml.safe_dump(seg, sort_keys=False)))
    table = testbed_table(rows, window=window, duration_s=duration, repetitions=reps, rule=rule)
    if (lowered := lowered_time_scale(partial)) is not None:
        table.notes.append(f"the machine fell behind at time scale {ts:g}: from segment "
                           f"{lowered[1] + 1} on the window ran at time scale {lowered[0]:g}")
    if len(run_dirs) > 1:
        table.notes.append(f"run in {len(run_dirs)} segments of {T54_SEGMENT_S} s, each after a "
                           f"{SEGMENT_WARMUP_S} s warm-up replaying the trace before it: "
                           + ", ".join(run_dirs))
    if options.quick and not warmup:
        table.notes.append(f"no warm-up: the window starts less than {T54_QUICK_WARMUP_S} s into "
                           "the test day, so it includes the replicas' start-up")
    if reps == 1:
        table.notes.append("one repetition: run-to-run noise not measured here (docs/table-5.4.md "
                           "gives it for the long run)")
    return _table_verdict(a, table, options, run_dir=run_dirs[0], rows=rows)


def _auto_time_scale(path: Path, data: dict[str, Any], start: int, duration: float,
                     warmup: float, options: Options) -> float:
    """`--t54-time-scale auto`: the highest time scale the probe finds this machine holds now
    at the window's busiest second, said in one line."""
    import yaml

    # the scenario loader and the probe: only for an auto time scale, as `_run` loads the runner
    from testbed.scenario.load import parse_scenario
    from testbed.scenario.pace import choose_time_scale

    probe = {**data, "clients": [{**c, "start_s": start} for c in data["clients"]],
             "duration_s": duration, "warmup_s": warmup, "time_scale": 1.0,
             "replica_work": "sleep"}
    scn = parse_scenario(yaml.safe_dump(probe, sort_keys=False), str(path), path.parent).scenario
    held, line = choose_time_scale(scn, path.parent)
    options.progress(f"Table 5.4: {line}")
    return held


def _table_verdict(a: Artefact, table: TableResult, options: Options,
                   run_dir: str | None = None, rows: list[dict[str, Any]] | None = None) -> Verdict:
    """A table's verdict: PASS when every cell and check passes; what failed, one line each.
    The rows of a scenario run behind it (Table 5.4) fail it as they fail that run: a failed cell
    (testbed.judge.verdict)."""
    if options.rule_only:
        table.notes.append("rule-based side only (--rule-only): no DRL column")
    bad = [f"{c.service} {c.policy}: {c.why}" for c in table.cells if c.passed is False]
    bad += [f"{c.text}: {c.detail}" for c in table.checks if not c.passed]
    run = run_verdict((), rows or ())
    bad += [f"failed cell {c}" for c in run.failed_cells]
    verdict = FAIL if run.verdict == FAIL else table.verdict
    not_run = table.not_run()
    summary = {PASS: "all cells and checks judged at this size within tolerance",
               FAIL: f"{len(bad)} outside tolerance",
               NOT_RUN: "not run at this size: its figures are the whole test day's",
               NOT_JUDGED: "no cell or check to judge"}[verdict]
    if not_run and verdict != NOT_RUN:
        summary += f"; NOT RUN at this size: {len(not_run)} part(s), listed apart"
    return Verdict(a.name, a.title, verdict, summary, bad, table=table, run_dir=run_dir,
                   decided_by="; ".join(not_run))


def discard_partial(out: Path) -> None:
    """Remove `<out>.partial` (used by tests and by the CLI when nothing was run)."""
    shutil.rmtree(out.with_name(out.name + ".partial"), ignore_errors=True)
