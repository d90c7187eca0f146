"""A run directory as the live page shows it: what was run (fields chosen one by one from the
manifest, never the whole of it), each cell repetition's fold, the run's progress and estimate of
what is left, and at the end its record's figures, checks and verdict."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

from testbed.clock import ScenarioClock
from testbed.config import TestbedSpec
from testbed.config.secrets import unredact_scenario, unredact_testbed
from testbed.judge.outcome import recorded_outcomes
from testbed.judge.verdict import run_verdict
from testbed.scenario.matrix import expand
from testbed.scenario.results import LATENESS_SLO_SHARE, RECORD
from testbed.scenario.spec import Scenario
from testbed.web.cellfold import CellFold
from testbed.web.labels import cell_key, masked_label
from testbed.web.tail import read_json

QUIET_S = 60.0  # wall seconds without a new line before an unfinished run is called quiet


def link_conditions(tb: dict[str, Any]) -> dict[str, Any]:
    """The link, slices and UE groups of a testbed document as a cell runs them (capacities,
    guarantees, AMBR, 5QI, the conditions traces): no core, no keys, no addresses of a store.

    tb: a testbed document (`TestbedSpec.model_dump(mode="json")`)."""
    link = tb.get("link") or {}
    cap = link.get("capacity_mbit")
    return {
        "link": {"uplink_mbit": link.get("uplink_mbit") or cap,
                 "downlink_mbit": link.get("downlink_mbit") or cap,
                 "delay_ms": link.get("delay_ms"), "uplink_loss": link.get("uplink_loss"),
                 "slicing": link.get("slicing"), "flow_queues": link.get("flow_queues"),
                 "traces": [{"target": _target(c), "trace": str(c.get("trace") or "")}
                            for c in link.get("conditions") or [] if isinstance(c, dict)]},
        "slices": [{k: s.get(k) for k in ("name", "sst", "sd", "subnet", "guaranteed_mbit",
                                          "ceiling_mbit")} for s in tb.get("slices") or []],
        "ue_groups": [{k: g.get(k) for k in ("name", "slice", "count", "ambr_uplink_mbit",
                                             "ambr_downlink_mbit", "five_qi")}
                      for g in tb.get("ue_groups") or []],
    }


def _target(c: dict[str, Any]) -> str:
    if c.get("ue_group"):
        return f"ue_group {c['ue_group']}"
    if c.get("slice"):
        return f"slice {c['slice']}"
    return "link"


class RunFold:
    """One run directory, folded as it grows (`poll`); `snapshot` and `delta` are what the page
    receives."""

    def __init__(self, path: Path):
        self.path = path
        self.manifest: dict[str, Any] | None = None
        self.about: dict[str, Any] = {}
        self.plan: list[dict[str, Any]] = []  # every (cell, repetition) the run will run
        self.cells: dict[str, CellFold] = {}
        self.record: dict[str, Any] | None = None
        self._record_stamp: tuple[int, int] | None = None
        self.created = time.time()
        self.finished_at: float | None = None
        self._changed = True
        self._about_sent = False
        self._final_sent: tuple[bool, bool] | None = None

    def rebase(self, path: Path) -> None:
        """The same run at another path (a reproduce's folder renamed at its end)."""
        self.path = path
        for fold in self.cells.values():
            fold.rebase(path / "cells" / fold.path.parent.name / fold.path.name)

    # -- reading --------------------------------------------------------------------------------
    def _read_manifest(self) -> None:
        m = read_json(self.path / "manifest.json")
        if m is None or not isinstance(m.get("scenario"), dict):
            return
        self.manifest = m
        scn = m["scenario"]
        try:
            self.created = datetime.fromisoformat(str(m.get("created"))).timestamp()
        except ValueError:
            self.created = (self.path / "manifest.json").stat().st_mtime
        self.about = {
            "name": scn.get("name"), "description": (scn.get("description") or "").strip(),
            "profile": m.get("profile"), "created": m.get("created"), "commit": m.get("commit"),
            "seed": scn.get("seed"), "engine": scn.get("engine", "testbed"),
            "time_scale": scn.get("time_scale"), "duration_s": scn.get("duration_s"),
            "warmup_s": scn.get("warmup_s"), "repetitions": scn.get("repetitions"),
            "scaler_period_s": scn.get("scaler_period_s"),
            "replica_work": scn.get("replica_work"),
            "services": [{"name": s.get("name"), "policy": s.get("policy"),
                          "replicas": s.get("replicas")} for s in scn.get("services") or []],
            "expect": list(scn.get("expect") or []),
            "run_dir": self.path.name}
        self.plan = self._plan(m)

    def _plan(self, m: dict[str, Any]) -> list[dict[str, Any]]:
        """Every cell and repetition with its planned scenario seconds and conditions, from the
        manifest (the matrix expanded as the run expanded it); [] when it does not validate."""
        try:
            scn = Scenario.model_validate(unredact_scenario(m["scenario"]))
            tb = TestbedSpec.model_validate(unredact_testbed(m["testbed"]))
            cells = expand(scn, tb)
        except (ValueError, TypeError, KeyError):
            return []
        out = []
        for c in cells:
            for rep in range(c.scenario.repetitions):
                out.append({
                    "key": cell_key(c.slug, rep), "index": c.index, "rep": rep,
                    "label": masked_label(c.params),
                    "span_s": c.scenario.warmup_s + c.scenario.duration_s,
                    "policies": {s.name: s.policy for s in c.scenario.services},
                    "time_scale": c.scenario.time_scale,
                    "conditions": link_conditions(c.testbed.model_dump(mode="json"))})
        return out

    def _read_record(self) -> bool:
        p = self.path / RECORD
        try:
            st = p.stat()
        except OSError:
            return False
        if (st.st_mtime_ns, st.st_size) == self._record_stamp:
            return False
        record = read_json(p)
        if record is None or not isinstance(record.get("rows"), list):
            return False
        self.record, self._record_stamp = record, (st.st_mtime_ns, st.st_size)
        self.finished_at = st.st_mtime
        return True

    def poll(self) -> bool:
        """Read what the run directory gained; True when anything changed."""
        changed = self._changed
        if self.manifest is None:
            self._read_manifest()
            changed |= self.manifest is not None
        for p in sorted((self.path / "cells").glob("*/rep-*")):
            try:
                rep = int(p.name.removeprefix("rep-"))
            except ValueError:
                continue
            key = cell_key(p.parent.name, rep)
            if key not in self.cells:
                self.cells[key] = CellFold(p)
                changed = True
        for fold in self.cells.values():
            changed |= fold.poll()
        changed |= self._read_record()
        self._changed = False
        return changed

    @property
    def finished(self) -> bool:
        """The run wrote its record (results.json): nothing more will come."""
        return self.record is not None

    # -- what the page gets ---------------------------------------------------------------------
    def head(self) -> dict[str, Any]:
        """The run's state: progress, the machine falling behind, and at the end its figures,
        checks, verdict and report."""
        now = self.finished_at or time.time()
        last = max([f.last_growth for f in self.cells.values()] or [self.created])
        out: dict[str, Any] = {
            "run_dir": self.path.name, "started": self.manifest is not None,
            "finished": self.finished, "progress": self.progress(now),
            "behind": self.behind(), "quiet_s": None, "now": time.time()}
        if not self.finished and time.time() - last > QUIET_S:
            out["quiet_s"] = round(time.time() - last)
        if self.record is not None:
            out["record"] = self._recorded()
        out["report"] = (self.path / "report.html").is_file()
        return out

    def _recorded(self) -> dict[str, Any]:
        record = self.record or {}
        rows = record.get("rows") or []
        outcomes = recorded_outcomes(record, self.about.get("expect", []))
        verdict = run_verdict(outcomes, rows, interrupted=bool(record.get("interrupted")))
        return {"rows": rows, "interrupted": bool(record.get("interrupted")),
                "problems": [str(p) for p in record.get("problems") or []],
                "verdict": verdict.verdict, "failed_cells": list(verdict.failed_cells),
                "exit_code": verdict.exit_code,
                "expect": [{"text": o.text, "verdict": o.verdict, "value": o.explain()}
                           for o in outcomes]}

    def behind(self) -> list[dict[str, Any]]:
        """Each cell and service whose figures are the machine's (MACHINE BEHIND): its clients'
        lateness and the bound, scenario ms; or, for replicas starved of a core by other work,
        the cell's line that says so (`why`)."""
        out = []
        for key, fold in self.cells.items():
            for service, late in fold.behind_schedule().items():
                out.append({"cell": key, "service": service, "lateness_ms": round(late, 1),
                            "bound_ms": LATENESS_SLO_SHARE * fold.slo_ms(service),
                            "final": fold.ended})
            if fold.ended:
                for service, why in (fold.info.get("starved") or {}).items():
                    out.append({"cell": key, "service": service, "why": why, "final": True})
        return out

    def progress(self, now: float) -> dict[str, Any]:
        """Cells done of those planned, the current one, and time elapsed and left, in scenario
        seconds and wall seconds. What is left in wall time is each cell's window at its time
        scale plus what the finished cells took beyond theirs (starting replicas, stopping), on
        average; before a cell has finished, the current cell's start so far stands for that."""
        plan = self.plan or [{"key": k, "span_s": f.span_s, "time_scale": f.clock.scale}
                             for k, f in self.cells.items()]
        ended = {k for k, f in self.cells.items() if f.ended}
        current = next((k for k in sorted(self.cells) if not self.cells[k].ended), None)
        scn_total = sum(p["span_s"] for p in plan)
        scn_done = sum(p["span_s"] for p in plan if p["key"] in ended)
        overheads = [float(f.info["ended"]) - float(f.info["started"]) - f.clock.wall(f.span_s)
                     for f in self.cells.values()
                     if f.ended and f.info.get("ended") and f.info.get("started")]
        cur = self.cells.get(current) if current else None
        in_cell_wall = 0.0
        if cur is not None:
            t = cur.now_t()
            if t is not None:
                scn_done += min(max(t + cur.warmup_s, 0.0), cur.span_s)
            if cur.info.get("started"):
                in_cell_wall = now - float(cur.info["started"])
        if overheads:
            overhead, estimate = sum(overheads) / len(overheads), "mean"
        elif cur is not None and cur.load_started and cur.info.get("started"):
            overhead, estimate = cur.load_started - float(cur.info["started"]), "first cell"
        else:
            overhead, estimate = 0.0, "at least"
        left_wall = sum(ScenarioClock(p["time_scale"]).wall(p["span_s"]) + overhead for p in plan
                        if p["key"] not in ended)
        left_wall = max(left_wall - in_cell_wall, 0.0)
        if self.finished:
            left_wall, estimate = 0.0, "done"
        return {"cells_total": len(plan), "cells_done": len(ended), "current": current,
                "elapsed_wall_s": round(max(now - self.created, 0.0), 1),
                "left_wall_s": round(left_wall, 1), "estimate": estimate,
                "elapsed_scn_s": round(scn_done, 1),
                "left_scn_s": round(max(scn_total - scn_done, 0.0), 1) if not self.finished else 0.0,
                "total_scn_s": scn_total}

    def snapshot(self) -> dict[str, Any]:
        """Everything so far: what was run, the plan, every cell, the run's state."""
        return {"about": self.about, "plan": self.plan, "head": self.head(),
                "cells": [f.snapshot() for _, f in sorted(self.cells.items())]}

    def delta(self) -> dict[str, Any] | None:
        """What changed since the last delta: the run's state, and each cell that changed (a
        running cell's head each time: its clock moves); None for a finished run with nothing
        new since."""
        cells = []
        for _, fold in sorted(self.cells.items()):
            d = fold.delta(force=not fold.ended and not self.finished)
            if d is not None:
                cells.append(d)
        # a finished run's head changes once more, when its report is written
        final = (self.finished, (self.path / "report.html").is_file())
        if self.finished and not cells and final == self._final_sent:
            return None
        if not any(f.behind for f in self.cells.values()):
            self._final_sent = final
        out: dict[str, Any] = {"head": self.head(), "cells": cells}
        if self.about and not self._about_sent:
            out["about"], out["plan"] = self.about, self.plan
        self._about_sent = bool(self.about)
        return out
