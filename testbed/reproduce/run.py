"""`testbed reproduce`: run the chosen artefacts, judge each against the paper, write one report.

    result = reproduce(select(["fig5.7", "table5.1"]), Options(quick=True))

Checks run first (artefacts, traces, models, root): bad input writes nothing. The work goes into
`<out>.partial/` and is renamed to `<out>/` only when the report is written, so a directory
without `.partial` always holds a finished report.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from testbed.errors import StateError
from testbed.reproduce.artefacts import Artefact, model_files, preflight
from testbed.reproduce.document import write
from testbed.reproduce.model import Options, ReproResult, Verdict
from testbed.reproduce.slicing import judge_slicing
from testbed.reproduce.tables import TableResult, sim_table, testbed_table

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
# Table 5.4's window of the test day: from 13:30, where the chatbot's and imgcls's loads move
# (shifts 0/8 h) and the simulator, run as the testbed runs, puts DRL and rule v2 0.02-0.04
# apart, 20 times the run-to-run noise; from 09:00 the chatbot idles at one replica and imgcls
# gets the same replicas under both policies (docs/table-5.4.md, `bench/table54_noise.py
# --sim-gaps`). TTS is idle at 13:30; its gap is largest at night: `--t54-start 21:00`.
T54_START_S = 48600
T54_QUICK_S = 120
T54_FULL_S = 1200
T54_FULL_REPS = 2


def default_out(quick: bool) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("runs") / f"{stamp}-reproduce{'-quick' if quick else ''}"


def reproduce(artefacts: list[Artefact], options: Options) -> ReproResult:
    preflight(artefacts, traces_dir=options.traces_dir, models_dir=options.models_dir,
              rule_only=options.rule_only)
    out = options.out or default_out(options.quick)
    if out.exists():
        raise StateError(f"{out} already exists: pass another --out or remove it")
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        raise StateError(f"{partial} is left from an interrupted run: remove it first")
    partial.mkdir(parents=True)
    started = time.monotonic()
    verdicts: list[Verdict] = []
    names = {a.name for a in artefacts}
    slicing_done: dict[str, Verdict] = {}
    for a in artefacts:
        t0 = time.monotonic()
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
        options.progress(f"{a.name}: {'PASS' if v.passed else 'FAIL'} ({v.summary})")
    result = ReproResult(out, verdicts, time.monotonic() - started)
    (partial / "verdicts.json").write_text(json.dumps(_jsonable(result), indent=1, default=str))
    write(result, partial, options)
    os.replace(partial, out)
    result.out = out
    return result


def _jsonable(result: ReproResult) -> dict[str, Any]:
    out = []
    for v in result.verdicts:
        d = {k: getattr(v, k) for k in ("artefact", "title", "passed", "summary", "details",
                                         "run_dir", "seconds")}
        if v.table is not None:
            d["table"] = {"key": v.table.key, "title": v.table.title, "oracle": v.table.oracle,
                          "checks": v.table.checks, "notes": v.table.notes,
                          "cells": [c.__dict__ for c in v.table.cells]}
        if v.slicing is not None:
            d["slicing"] = v.slicing
        out.append(d)
    return {"seconds": result.seconds, "verdicts": out}


def _run(path: Path, partial: Path, options: Options, overrides: dict[str, Any] | None = None,
         *, text: str | None = None) -> tuple[Path, list[dict[str, Any]]]:
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
    cells: dict[tuple[str, int, bool], dict[str, Any]] = {}
    for r in rows:
        if "service" not in r or r.get("mean_latency_ms") is None:
            continue
        key = (r["service"], int(r["iperf_flows"]), bool(r["slicing"]))
        c = cells.setdefault(key, {"mean": [], "slo": []})
        c["mean"].append(r["mean_latency_ms"])
        c["slo"].append(r["slo_violation_rate"])
    merged = {k: {"mean_ms": sum(v["mean"]) / len(v["mean"]), "slo": sum(v["slo"]) / len(v["slo"])}
              for k, v in cells.items()}
    flows = sorted({k[1] for k in merged})
    verdict = judge_slicing(merged, flows)
    seconds = time.monotonic() - t0
    table = {f"{s}|{f}|{'on' if sl else 'off'}": v for (s, f, sl), v in merged.items()}
    out = {}
    from testbed.reproduce.artefacts import ARTEFACTS

    for name, services in (("fig5.7", ("imgcls",)), ("fig5.8", ("tts", "chatbot"))):
        judged = {s: verdict[s] for s in services if s in verdict}
        missing = [s for s in services if s not in verdict]
        passed = bool(judged) and all(ok for ok, _ in judged.values())
        summary = ", ".join(f"{s} {'as stated' if ok else 'differs: ' + why}"
                            for s, (ok, why) in judged.items())
        if missing:
            summary += (", " if summary else "") + f"{', '.join(missing)} not run (flows {flows})"
        out[name] = Verdict(name, ARTEFACTS[name].title, passed, summary, run_dir=str(run_dir),
                            slicing={"flows": flows, "cells": table}, seconds=seconds)
    return out


def _sim(a: Artefact, options: Options) -> Verdict:
    key = a.name.removeprefix("table")
    models = None if options.rule_only else options.models_dir
    # --quick: the whole day at 8 units (seconds), the first 6 hours at 128 units, no oracle there
    big = key == "5.3"
    table = sim_table(key, traces_dir=options.traces_dir, models_dir=models, seed=options.seed,
                      oracle=not (options.quick and big),
                      max_steps=720 if (options.quick and big) else None,
                      progress=options.progress)
    return _table_verdict(a, table, options)


def _table54(a: Artefact, partial: Path, options: Options) -> Verdict:
    import yaml

    from testbed.config.yamlfile import load_yaml_file

    duration = options.t54_duration_s or (T54_QUICK_S if options.quick else T54_FULL_S)
    reps = options.t54_repetitions or (1 if options.quick else T54_FULL_REPS)
    start = T54_START_S if options.t54_start_s is None else options.t54_start_s
    path = SCENARIOS / "slo-testbed.yaml"
    data = dict(load_yaml_file(path).data)
    models = model_files(options.models_dir.resolve())
    data["services"] = [
        {**s, "model": str(models[s["name"]])} if not options.rule_only
        else {k: v for k, v in s.items() if k != "model"} for s in data["services"]]
    data["clients"] = [{**c, "start_s": start} for c in data["clients"]]
    data["traces_dir"] = str(options.traces_dir.resolve())
    data.update(duration_s=duration, repetitions=reps,
                matrix={"policy": ["rule_v2"] if options.rule_only else ["ppo", "rule_v2"]},
                expect=[], markers=[])
    window = (f"{duration:g} s of the test day from {start // 3600:02d}:{start % 3600 // 60:02d}, "
              f"{reps} repetition(s)")
    options.progress(f"Table 5.4: {window}")
    run_dir, rows = _run(path, partial, options, text=yaml.safe_dump(data, sort_keys=False))
    table = testbed_table(rows, window=window)
    if reps == 1:
        table.notes.append("one repetition: run-to-run noise not measured here (docs/table-5.4.md "
                           "gives it for the long run)")
    return _table_verdict(a, table, options, run_dir=str(run_dir))


def _table_verdict(a: Artefact, table: TableResult, options: Options,
                   run_dir: str | None = None) -> Verdict:
    """A table's verdict: PASS when every cell and check passes; what failed, one line each."""
    if options.rule_only:
        table.notes.append("rule-based side only (--rule-only): no DRL column")
    bad = [f"{c.service} {c.policy}: {c.why}" for c in table.cells if c.passed is False]
    bad += [f"{t}: {d}" for t, ok, d in table.checks if not ok]
    return Verdict(a.name, a.title, table.passed,
                   "all cells within tolerance" if table.passed else f"{len(bad)} outside",
                   bad, table=table, run_dir=run_dir)


def discard_partial(out: Path) -> None:
    """Remove `<out>.partial` (used by tests and by the CLI when nothing was run)."""
    shutil.rmtree(out.with_name(out.name + ".partial"), ignore_errors=True)
