"""The run directory: where a scenario run keeps everything, and the manifest that repeats it.

    runs/<UTC time>-<scenario>/
        manifest.json          resolved scenario + testbed, the service profiles they ran with,
                               seed, commit, package versions, host
        cells/<slug>/rep-<k>/  requests/*.jsonl, samples.jsonl, decisions.jsonl, events.jsonl,
                               iperf/*.json, cell.json (params, times, status, problems), logs/
        sim/<slug>.json        the same cell through the simulator (compare_sim)
        results.json           result rows and expect: outcomes
        report.md, report.html, plots/*.png
"""

from __future__ import annotations

import json
import platform
import socket
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from testbed.config.secrets import redact_scenario, redact_testbed
from testbed.paths import git_commit
from testbed.profiles import load_profiles
from testbed.scenario.profiles import apply_changes

PACKAGES = ("testbed", "pydantic", "aiohttp", "numpy", "pymongo", "montydb", "torch",
            "stable-baselines3", "sb3-contrib", "gymnasium", "matplotlib", "typer", "rich")


def package_versions() -> dict[str, str]:
    """The installed versions of the packages a run's figures depend on (PACKAGES)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def host_facts() -> dict[str, Any]:
    """The machine a run ran on: hostname, platform, Python, CPUs, kernel."""
    import os

    return {"hostname": socket.gethostname(), "platform": platform.platform(),
            "python": sys.version.split()[0], "cpus": os.cpu_count(),
            "kernel": platform.release()}


def write_manifest(run_dir: Path, *, scenario: dict[str, Any], testbed: dict[str, Any],
                   source: str, base_dir: Path, profile: str, overrides: dict[str, Any]) -> Path:
    """The run's manifest.json: what was run and where. run_dir: the run directory; scenario,
    testbed: the validated specs (secrets masked); source: the scenario file; base_dir: its
    folder; profile: local or lab; overrides: the command line's."""
    manifest = {
        "format": 1,
        "created": datetime.now(timezone.utc).isoformat(),
        "source": source,
        "base_dir": str(Path(base_dir).resolve()),
        "profile": profile,
        "scenario": redact_scenario(scenario),  # no key seed or K/OPc: run dirs are shared
        "testbed": redact_testbed(testbed),
        "service_profiles": used_profiles(scenario, Path(base_dir)),
        "overrides": overrides,
        "seed": scenario.get("seed"),
        "commit": git_commit(),
        "packages": package_versions(),
        "host": host_facts(),
        "argv": sys.argv,
    }
    path = run_dir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2, default=str))
    return path


def used_profiles(scenario: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """The profiles of the scenario's services as the run reads them: the packaged ones with the
    scenario's `service_profiles:` file over them (each number's source says which), so that the
    run directory alone tells what a service of the user's own was.

    scenario: the scenario as recorded; base_dir: its folder."""
    own = scenario.get("service_profiles")
    profiles = apply_changes(load_profiles(base_dir / own if own else None),
                             scenario.get("profiles") or {})
    names = [s["name"] for s in scenario.get("services", [])]
    return {n: profiles[n].model_dump(mode="json") for n in names if n in profiles}


@dataclass(frozen=True)
class CellDir:
    """Where one repetition of one cell keeps its files."""

    path: Path

    @classmethod
    def create(cls, run_dir: Path, slug: str, rep: int) -> CellDir:
        """The directory of repetition `rep` of the cell `slug` in `run_dir`, made with its subfolders."""
        p = run_dir / "cells" / slug / f"rep-{rep}"
        for sub in ("requests", "iperf", "logs"):
            (p / sub).mkdir(parents=True, exist_ok=True)
        return cls(p)

    @property
    def requests(self) -> Path:
        """requests/: each client's request records (JSON lines)."""
        return self.path / "requests"

    @property
    def iperf(self) -> Path:
        """iperf/: iperf3's JSON per cross-traffic entry."""
        return self.path / "iperf"

    @property
    def logs(self) -> Path:
        """logs/: the replicas' and clients' output."""
        return self.path / "logs"

    @property
    def samples(self) -> Path:
        """samples.jsonl: the metrics sampled during the cell."""
        return self.path / "samples.jsonl"

    @property
    def host(self) -> Path:
        """host.jsonl: each wall second, the host's steal and each process group's wait for a
        core (testbed.metrics.host)."""
        return self.path / "host.jsonl"

    @property
    def decisions(self) -> Path:
        """decisions.jsonl: the scaler's decisions."""
        return self.path / "decisions.jsonl"

    @property
    def events(self) -> Path:
        """events.jsonl: replica events and problems."""
        return self.path / "events.jsonl"

    @property
    def replicas(self) -> Path:
        """What each replica reported it runs, once per scaler period (local testbed)."""
        return self.path / "replicas.jsonl"

    @property
    def conditions(self) -> Path:
        """conditions.jsonl: each conditions-trace step applied, with its time (local testbed)."""
        return self.path / "conditions.jsonl"

    @property
    def net(self) -> Path:
        """net.jsonl: the HTB counters of each slice and UE leaf, every second (local testbed)."""
        return self.path / "net.jsonl"

    @property
    def info(self) -> Path:
        """cell.json: the cell's parameters, status, profiles and problems."""
        return self.path / "cell.json"


def append_jsonl(path: Path, row: dict[str, Any]) -> None:
    """Append `row` to the JSON-lines file `path`."""
    with path.open("a") as f:
        f.write(json.dumps(row, default=str, separators=(",", ":")) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of the JSON-lines file `path` ([] when it does not exist)."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a crash: the rest is still good
    return rows
