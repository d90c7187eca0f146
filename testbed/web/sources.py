"""What a live page watches: one run directory, or a reproduce's folder (its scenario runs in
turn, the artefacts judged so far and its report), found and refused here before a port opens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.errors import StateError
from testbed.web.runfold import RunFold


class RunSource:
    """One run directory (`testbed run --web`, `testbed watch RUN_DIR`)."""

    mode = "run"

    def __init__(self, path: Path):
        self.path = path
        self.runs: dict[str, RunFold] = {path.name: RunFold(path)}

    def poll(self) -> set[str]:
        """Fold what the run gained; the ids of the runs that changed."""
        return {i for i, fold in self.runs.items() if fold.poll()}

    @property
    def newest(self) -> str | None:
        return self.path.name

    @property
    def finished(self) -> bool:
        return self.runs[self.path.name].finished

    def report(self) -> Path:
        """Where the report of what this source watches is (or will be)."""
        return self.path / "report.html"

    def run_dir(self, run_id: str) -> Path | None:
        """The directory of the run `run_id`, None for one this source does not hold."""
        fold = self.runs.get(run_id)
        return fold.path if fold is not None else None

    def overview(self) -> dict[str, Any]:
        """The runs, and (a reproduce) its artefacts' verdicts so far."""
        return {"mode": self.mode, "runs": [_entry(i, f) for i, f in self.runs.items()],
                "newest": self.newest, "finished": self.finished,
                "report": self.report().is_file()}


class ReproduceSource(RunSource):
    """A `testbed reproduce` folder: `<out>.partial` while it runs, `<out>` once its report is
    written; its scenario runs under runs/, its judged artefacts under done/ (verdicts.json at the
    end)."""

    mode = "reproduce"

    def __init__(self, out: Path):
        self.out = out.with_name(out.name.removesuffix(".partial"))
        self.path = self.base
        self.runs = {}

    @property
    def base(self) -> Path:
        partial = self.out.with_name(self.out.name + ".partial")
        return partial if partial.is_dir() or not self.out.is_dir() else self.out

    def poll(self) -> set[str]:
        base = self.base
        if base != self.path:
            self.path = base
            for fold in self.runs.values():
                fold.rebase(base / "runs" / fold.path.name)
        for manifest in sorted((base / "runs").glob("*/manifest.json")):
            self.runs.setdefault(manifest.parent.name, RunFold(manifest.parent))
        return super().poll()

    @property
    def newest(self) -> str | None:
        return max(self.runs, default=None)  # run directories are named by their UTC start

    @property
    def finished(self) -> bool:
        return (self.out / "verdicts.json").is_file()

    def report(self) -> Path:
        return self.out / "report.html"

    def artefacts(self) -> list[dict[str, Any]]:
        """Each artefact judged so far: its name, title, verdict and summary."""
        done = self.out / "verdicts.json"
        if done.is_file():
            try:
                found = json.loads(done.read_text()).get("verdicts", [])
            except (OSError, ValueError):
                found = []
        else:
            found = []
            for p in sorted((self.base / "done").glob("*.json")):
                try:
                    found.append(json.loads(p.read_text()))
                except (OSError, ValueError):
                    continue
        return [{k: v.get(k) for k in ("artefact", "title", "verdict", "summary", "seconds")}
                for v in found if isinstance(v, dict)]

    def overview(self) -> dict[str, Any]:
        return {**super().overview(), "artefacts": self.artefacts()}


def _entry(run_id: str, fold: RunFold) -> dict[str, Any]:
    p = fold.head()["progress"]
    return {"id": run_id, "name": fold.about.get("name"), "finished": fold.finished,
            "verdict": (fold.head().get("record") or {}).get("verdict"),
            "cells_done": p["cells_done"], "cells_total": p["cells_total"]}


def source_for(path: Path) -> RunSource:
    """The source `testbed watch PATH` serves: a run directory (its manifest.json), or a
    reproduce's folder (`runs/` of run directories, or `options.json` while it starts); anything
    else is one StateError naming it.

    path: what the user named."""
    if (path / "manifest.json").is_file():
        manifest = path / "manifest.json"
        try:
            doc = json.loads(manifest.read_text())
        except (OSError, ValueError) as exc:
            raise StateError(f"{manifest}: not a run manifest ({exc})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("scenario"), dict):
            raise StateError(f"{manifest}: not a run manifest (no scenario)")
        return RunSource(path)
    base = path if path.name.endswith(".partial") else path.with_name(path.name + ".partial")
    for folder in (path, base):
        if (folder / "runs").is_dir() or (folder / "options.json").is_file() \
                or (folder / "verdicts.json").is_file():
            return ReproduceSource(path)
    if not path.exists():
        raise StateError(f"{path}: no such run directory")
    raise StateError(f"{path} is not a run directory (no manifest.json) nor a reproduce folder "
                     "(no runs/): name runs/<time>-<scenario> or a reproduce's folder")
