"""A scenario cell through the simulator: the same services, policies, traces and units.

Used for `engine: sim` scenarios (Tables 5.1–5.3) and for the sim-to-testbed check of testbed
cells (`compare_sim: true`). Constant-rate clients become constant traces; a trace client's
shift and start offset rotate and cut the trace exactly as the load client does.

A scenario with `pipelines:` runs its `engine: sim` cells on the GPU simulator in DRAFAS's
configuration (25 % slices, batch 1; the scenario's `interference:`), which routes each chain: a
later stage takes the requests the stage before completes, not a client's (check_scenario refuses
a client for it). The chains' figures go to `chains` (see `GpuSimCluster.chain_results`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from testbed.load.trace import Trace
from testbed.profiles import load_profiles
from testbed.scaler.fa2 import Pipeline
from testbed.scaler.factory import make_policy
from testbed.scenario.live import LiveView
from testbed.scenario.matrix import Cell
from testbed.scenario.profiles import scenario_profiles
from testbed.scenario.rundir import CellDir
from testbed.scenario.spec import Scenario, read_trace, trace_dir
from testbed.sim.cluster import DEFAULT_OPTIONS, TESTBED_OPTIONS, with_measure
from testbed.sim.gpu import GpuSimCluster
from testbed.train.evaluate import EvalRun, evaluate


def cell_inputs(scns: Scenario | Iterable[Scenario], base_dir: Path) -> dict[str, Any]:
    """The files cells read, read here, each once: `traces` (path -> Trace) and `profiles` (the
    profile file's path, or None, -> its profiles), for a worker that may not share this
    filesystem.

    scns: the cells' scenarios (a sweep's cells mostly share their files); base_dir: their folder."""
    traces: dict[str, Trace] = {}
    profiles: dict[str | None, Any] = {}
    for scn in [scns] if isinstance(scns, Scenario) else scns:
        for c in scn.clients:
            path = trace_dir(scn, base_dir) / c.trace if c.trace else None
            if path is not None and str(path) not in traces:
                traces[str(path)] = read_trace(scn, path)
        own = str(base_dir / scn.service_profiles) if scn.service_profiles else None
        if own not in profiles:
            profiles[own] = load_profiles(own)
    return {"traces": traces, "profiles": profiles}


def cell_traces(scn: Scenario, base_dir: Path, inputs: dict[str, Any] | None = None
                ) -> tuple[dict[str, Any], dict[str, float]]:
    """Per service: its trace window (one client per service in the simulator) and ratio.

    scn: the cell's scenario; base_dir: its folder; inputs: `cell_inputs`' traces, if read
    already."""

    traces: dict[str, Trace] = {}
    ratios: dict[str, float] = {}
    seconds = math.ceil(scn.duration_s)
    for c in scn.clients:
        if c.service in traces:
            raise ValueError(f"the simulator takes one client per service ({c.service} has more)")
        if c.rate is not None:
            traces[c.service] = Trace.constant(c.rate, seconds, name=f"constant {c.rate:g}/s")
            ratios[c.service] = 1.0
            continue
        path = trace_dir(scn, base_dir) / c.trace
        full = (inputs or {}).get("traces", {}).get(str(path)) or read_trace(scn, path)
        traces[c.service] = full.window(c.shift_hours, c.start_s, seconds)
        ratios[c.service] = c.ratio
    return traces, ratios


def sim_profiles(scn: Scenario, cluster_profiles: dict[str, Any] | None,
                 base_dir: Path | None = None, inputs: dict[str, Any] | None = None
                 ) -> dict[str, Any]:
    """The simulator's profiles: the packaged ones (Table 4.4) with the scenario's
    `service_profiles:` file (under `base_dir`) over them, or — for the sim-to-testbed check —
    exactly the profiles the testbed's replicas ran with; each starts with the scenario's replicas.

    scn: the cell's scenario; cluster_profiles: the testbed cell's recorded profiles, when the
    simulator runs beside one; inputs: `cell_inputs`' profiles, if read already."""

    own = base_dir / scn.service_profiles if scn.service_profiles and base_dir is not None else None
    read = (inputs or {}).get("profiles", {})
    profiles = cluster_profiles or scenario_profiles(scn, base_dir, read.get(str(own) if own else None))
    out = {}
    for s in scn.services:
        p = profiles[s.name]
        if cluster_profiles is not None:  # the testbed's replicas: no admission limit, no jitter
            p = p.replace(rate_limit=None, startup_max_ms=None)
        out[s.name] = p.replace(initial_replicas=s.replicas)
    return out


def run_sim_cell(scn: Scenario, base_dir: Path, seed: int,
                 cluster_profiles: dict[str, Any] | None = None,
                 like_testbed: bool = False,
                 chains: list[dict[str, Any]] | None = None,
                 inputs: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Figures per service, in the keys the report reads (`slo_violation_rate`, `instances`,
    `proc_time` in seconds, `reward`, `steps_per_second`).

    `like_testbed` models the local testbed rather than the paper's simulator: the load client
    carries fractional trace counts to the next interval instead of truncating them, and the
    balancer's utilization counts ready replicas only. With the scenario's `pipelines:` (and not
    `like_testbed`: the testbed's replicas do not forward) the chains are routed and their figures
    appended to `chains`.

    scn: the cell's scenario; base_dir: its folder; seed: the cell's; cluster_profiles: as
    `sim_profiles` takes them; inputs: the cell's files as `cell_inputs` read them (None: read
    here)."""

    traces, ratios = cell_traces(scn, base_dir, inputs)
    routed = bool(scn.pipelines) and not like_testbed
    later = {name for p in scn.pipelines for name in p.services[1:]} if routed else set()
    services = [s for s in scn.services if s.name in traces or s.name in later]
    profiles = {k: v for k, v in sim_profiles(scn, cluster_profiles, base_dir, inputs).items()
                if k in traces or k in later}
    policies = {s.name: make_policy(s.policy, s.name, total_units=scn.total_units, seed=seed,
                                    model=str(base_dir / s.model) if s.model else None,
                                    profiles=profiles, base_dir=base_dir,
                                    options=s.policy_args)
                for s in services}
    steps = max(1, int(scn.duration_s // scn.scaler_period_s))
    options = with_measure(TESTBED_OPTIONS if like_testbed else DEFAULT_OPTIONS, scn.measure)
    cluster = _routed_cluster(scn, profiles, traces, ratios, seed) if routed else None
    results = evaluate(policies, traces, ratios, total_units=scn.total_units, seed=seed,
                       profiles=profiles, options=options,
                       run=EvalRun(max_steps=steps, cluster=cluster, latency_percentiles=True))
    if cluster is not None and chains is not None:
        seconds = max(1, min(steps, int(cluster.now // cluster.step_seconds))) * cluster.step_seconds
        chains += [{**c, "on_time_rps": c["on_time"] / seconds} for c in cluster.chain_results()]
    return {name: r.as_json() for name, r in results.items()}


def _routed_cluster(scn: Scenario, profiles: dict[str, Any], traces: dict[str, Any],
                    ratios: dict[str, float], seed: int) -> Any:
    """The GPU simulator in DRAFAS's configuration with the scenario's chains routed."""

    return GpuSimCluster(
        profiles, traces, ratios, gpus=max(1, scn.total_units // 4), seed=seed,
        interference=scn.interference, source=f"scenario {scn.name}",
        chains=[Pipeline(tuple(p.services), p.sla_ms) for p in scn.pipelines],
    )


def simulate_cell(cell: Cell, rep: int, base_dir: Path,
                  inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """One repetition of one `engine: sim` cell, as the files it leaves in its cell directory
    (file name -> JSON value: `sim.json`, `chains.json` when chains are routed, `cell.json`).

    cell: the matrix cell; rep: the repetition (seed = the scenario's seed + rep); base_dir: where
    the scenario's relative traces and models live; inputs: its traces and profiles as
    `cell_inputs` read them, for a worker without those files (models and policy modules are
    still read at their paths). Writes nothing, so it runs in any process or on any machine
    (`testbed.scenario.sweep`)."""

    scn = cell.scenario
    info = {"slug": cell.slug, "label": cell.label, "params": cell.params, "rep": rep,
            "engine": "sim", "services": [s.name for s in scn.services],
            "total_units": scn.total_units, "duration_s": scn.duration_s,
            "ratios": {c.service: c.ratio for c in scn.clients},
            "policies": {s.name: s.policy for s in scn.services}, "measure": scn.measure,
            "started": time.time()}
    chains: list[dict] = []
    files: dict[str, Any] = {"sim.json": run_sim_cell(scn, base_dir, seed=scn.seed + rep,
                                                      chains=chains, inputs=inputs)}
    if chains:
        files["chains.json"] = chains
    info.update(status="ok", ended=time.time(), problems=[])
    files["cell.json"] = info
    return files


def write_cell_files(celldir: CellDir, files: dict[str, Any]) -> None:
    """The files of `simulate_cell` into celldir, `cell.json` last: a cell directory with a
    `cell.json` is a finished one (`testbed.scenario.results.run_rows`)."""

    for name in sorted(files, key=lambda n: n == "cell.json"):
        (celldir.path / name).write_text(json.dumps(files[name], indent=1))


def after_warmup(scn: Scenario, samples: list[dict[str, Any]]) -> Scenario:
    """The scenario with each service's initial replicas set to those the cell's warm-up left
    (its last warm-up sample's desired replicas, which hold the units); unchanged without one.

    scn: the cell's scenario; samples: the warm-up's samples."""
    left = {s["service"]: s["desired"] for s in samples if s.get("warmup")}
    if not scn.warmup_s or not left:
        return scn
    services = [s.model_copy(update={"replicas": max(1, int(left.get(s.name, s.replicas)))})
                for s in scn.services]
    return scn.model_copy(update={"services": services})


class SimCellRunner:
    """One repetition of one cell through the simulator (`engine: sim`)."""

    def __init__(self, cell: Cell, rep: int, celldir: CellDir, base_dir: Path, view: LiveView):
        self.cell, self.rep, self.dir, self.base_dir, self.view = cell, rep, celldir, base_dir, view

    def run(self) -> list[str]:
        """Run the cell through the simulator and write its files; returns the problems it recorded."""
        self.view.set_phase(self.cell, self.rep, "simulating")
        write_cell_files(self.dir, simulate_cell(self.cell, self.rep, self.base_dir))
        return []
