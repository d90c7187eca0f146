"""Runs a scenario end to end on any profile, cell by cell, into a run directory.

For each matrix cell and repetition the profile (`testbed.scenario.backends`) prepares the cell
and supplies a cluster backend, a metrics source and a traffic backend; the runner then does the
same on every profile: replicas ready → iperf3 + clients → a sample every scenario second (5 on
the lab) and a scaler decision every period → stop → records. Local: a fresh testbed per cell,
the cell's asyncio work in the data-network namespace, clients in UE namespaces. Lab: the lab's
Deployments, Prometheus and UE hosts (`testbed.scenario.lab`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console

from testbed.cluster.base import ClusterBackend
from testbed.errors import MissingRequirement, TestbedError
from testbed.load.traffic import ClientJob, IperfJob
from testbed.scenario.backends import CellBackends, LocalProfile, Profile
from testbed.scenario.expect import Outcome, evaluate_all
from testbed.scenario.live import LiveView
from testbed.scenario.load import LoadedScenario
from testbed.scenario.matrix import Cell, expand
from testbed.scenario.results import LOST_ERRORS, SLO_MS, lost_requests, read_records, run_rows
from testbed.scenario.rundir import CellDir, append_jsonl, new_run_dir, read_jsonl, write_manifest
from testbed.scenario.spec import Scenario, trace_dir


@dataclass
class RunOptions:
    out_root: Path = Path("runs")
    profile: str = "local"
    time_scale: float | None = None  # overrides the scenario's
    duration_s: float | None = None  # overrides the scenario's (a shorter window for CI)
    repetitions: int | None = None
    metrics: str | None = None  # overrides the scenario's `metrics:` (in-process or prometheus)
    progress: bool = True
    console: Console | None = None
    run_dir: Path | None = None
    lab: Any = None  # testbed.scenario.lab.LabOptions for the lab profile (inventory, --check)
    # builds the profile from the run (Python callers and tests: a lab profile on other clients)
    profile_factory: Callable[[ScenarioRun], Profile] | None = None


@dataclass
class RunResult:
    run_dir: Path
    rows: list[dict[str, Any]]
    outcomes: list[Outcome]
    interrupted: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        # a check the data cannot decide at this size does not fail a run; one without data does
        return not self.interrupted and not any(o.fails_run for o in self.outcomes)


MIN_FREE_MB = 200  # request records, samples and plots of a CI-size run take a few MB; a day, ~100


def require_free_space(folder: Path, need_mb: int = MIN_FREE_MB) -> None:
    """Enough room where the run directory goes, checked before the first second of work."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free_mb = shutil.disk_usage(probe).free // 2**20
    if free_mb < need_mb:
        raise MissingRequirement(f"{folder}: {free_mb} MB free, a run needs at least {need_mb} MB "
                                 "(free some space or pass --out elsewhere)")


def effective(loaded: LoadedScenario, options: RunOptions) -> Scenario:
    """The scenario with command-line overrides applied."""
    update: dict[str, Any] = {}
    if options.time_scale is not None:
        update["time_scale"] = options.time_scale
    if options.duration_s is not None:
        update["duration_s"] = options.duration_s
    if options.repetitions is not None:
        update["repetitions"] = options.repetitions
    if options.metrics is not None:
        update["metrics"] = options.metrics
    return loaded.scenario.model_copy(update=update) if update else loaded.scenario


class ScenarioRun:
    """One run of a scenario: its run directory, its cells, and the results at the end.

        with ScenarioRun(load_scenario("scenarios/smoke.yaml"), RunOptions()) as run:
            for cell in run.cells: run.run_cell(cell)
        result = run.finish()

    Leaving the `with` block, also by an exception, closes the profile (`close()`, safe twice).
    """

    def __init__(self, loaded: LoadedScenario, options: RunOptions | None = None):
        self.options = options or RunOptions()
        if self.options.profile not in ("local", "lab"):
            raise TestbedError(f"profile {self.options.profile!r}: local or lab")
        if self.options.profile == "lab" and self.options.lab is None \
                and self.options.profile_factory is None:
            raise TestbedError("the lab profile needs an inventory (-i INVENTORY)")
        self.loaded = loaded
        self.scenario = effective(loaded, self.options)
        self.cells = expand(self.scenario, loaded.testbed)
        if self.scenario.engine == "testbed" and self.options.profile == "local":
            from testbed.bringup.local import require_root

            require_root("a testbed scenario")
            if self.scenario.metrics == "prometheus":
                from testbed.metrics.server import find_prometheus

                find_prometheus()  # before the run directory and the first testbed
            flows = any(x.flows for c in self.cells for x in c.scenario.cross_traffic)
            if flows and shutil.which("iperf3") is None:
                raise MissingRequirement("the scenario's cross_traffic needs iperf3 on PATH "
                                         "(apt-get install iperf3; scripts/setup does)")
        require_free_space(self.options.out_root)
        self.console = self.options.console or Console(stderr=True)
        self.run_dir = self.options.run_dir or new_run_dir(self.options.out_root, self.scenario.name)
        o = self.options
        write_manifest(self.run_dir, scenario=self.scenario.model_dump(mode="json"),
                       testbed=loaded.testbed.model_dump(mode="json"), source=loaded.source,
                       base_dir=loaded.base_dir, profile=o.profile,
                       overrides={k: v for k, v in (("time_scale", o.time_scale),
                                                    ("duration_s", o.duration_s),
                                                    ("repetitions", o.repetitions))
                                  if v is not None})
        self.problems: list[str] = []
        self.interrupted = False
        self.profile: Profile | None = None
        if self.scenario.engine == "testbed":
            self.profile = self._make_profile()

    def _make_profile(self) -> Profile:
        if self.options.profile_factory is not None:
            return self.options.profile_factory(self)
        if self.options.profile == "local":
            return LocalProfile()
        from testbed.scenario.lab import LabProfile

        return LabProfile(self.options.lab, self.scenario, self.loaded.testbed,
                          self.loaded.base_dir, self.run_dir)

    def __enter__(self) -> ScenarioRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Undo what the profile holds for the run (the lab: units, replicas, shaping)."""
        if self.profile is not None:
            problems = self.profile.close() or []
            self.profile = None
            for p in problems:
                self.problems.append(f"cleanup: {p}")

    def run_cell(self, cell: Cell, view: LiveView | None = None) -> list[str]:
        """Every repetition of one cell; returns the problems it recorded."""
        view = view or LiveView(self.console, [cell], self.scenario.repetitions, enabled=False)
        problems: list[str] = []
        for rep in range(self.scenario.repetitions):
            celldir = CellDir.create(self.run_dir, cell.slug, rep)
            if self.scenario.engine == "sim":
                problems += SimCellRunner(cell, rep, celldir, self.loaded.base_dir, view).run()
            else:
                try:
                    problems += CellRunner(cell, rep, celldir, self.loaded.base_dir, view,
                                           self.profile).run()
                except KeyboardInterrupt:
                    self.interrupted = True
                    raise
        self.problems += problems
        return problems

    def finish(self) -> RunResult:
        self.close()
        rows = run_rows(self.run_dir)
        outcomes = evaluate_all(self.scenario.expect, rows) if not self.interrupted else []
        (self.run_dir / "results.json").write_text(json.dumps(
            {"rows": rows, "expect": [asdict(o) for o in outcomes],
             "interrupted": self.interrupted, "problems": self.problems}, indent=1, default=str))
        return RunResult(self.run_dir, rows, outcomes, self.interrupted, self.problems)


def run_scenario(loaded: LoadedScenario, options: RunOptions | None = None) -> RunResult:
    """Every cell and repetition with a live view, then results and expectations (the caller writes
    the report: `testbed.report.write_report(result.run_dir)`)."""
    with ScenarioRun(loaded, options) as run, LiveView(
            run.console, run.cells, run.scenario.repetitions, enabled=run.options.progress) as view:
        for cell in run.cells:
            try:
                run.run_cell(cell, view)
            except KeyboardInterrupt:
                break
    return run.finish()


class SimCellRunner:
    """One repetition of one cell through the simulator (`engine: sim`)."""

    def __init__(self, cell: Cell, rep: int, celldir: CellDir, base_dir: Path, view: LiveView):
        self.cell, self.rep, self.dir, self.base_dir, self.view = cell, rep, celldir, base_dir, view

    def run(self) -> list[str]:
        from testbed.scenario.simcell import run_sim_cell

        scn = self.cell.scenario
        self.view.set_phase(self.cell, self.rep, "simulating")
        info = {"slug": self.cell.slug, "label": self.cell.label, "params": self.cell.params,
                "rep": self.rep, "engine": "sim", "services": [s.name for s in scn.services],
                "total_units": scn.total_units, "duration_s": scn.duration_s,
                "ratios": {c.service: c.ratio for c in scn.clients},
                "policies": {s.name: s.policy for s in scn.services}, "started": time.time()}
        chains: list[dict] = []
        results = run_sim_cell(scn, self.base_dir, seed=scn.seed + self.rep, chains=chains)
        (self.dir.path / "sim.json").write_text(json.dumps(results, indent=1))
        if chains:
            (self.dir.path / "chains.json").write_text(json.dumps(chains, indent=1))
        info.update(status="ok", ended=time.time(), problems=[])
        self.dir.info.write_text(json.dumps(info, indent=1))
        return []


class CellRunner:
    """One repetition of one cell on any profile: the profile supplies the cluster, metrics and
    traffic backends; this drives them (replicas ready → iperf3 + clients → samples and a scaler
    decision every period → stop → records)."""

    def __init__(self, cell: Cell, rep: int, celldir: CellDir, base_dir: Path, view: LiveView,
                 profile: Profile | None = None):
        self.cell, self.rep, self.dir, self.base_dir, self.view = cell, rep, celldir, base_dir, view
        self.profile = profile or LocalProfile()
        self.scn = cell.scenario
        self.problems: list[str] = []
        self.closing = False  # set once the cell stops its own replicas
        self.info: dict[str, Any] = {
            "slug": cell.slug, "label": cell.label, "params": cell.params, "rep": rep,
            "services": [s.name for s in self.scn.services], "time_scale": self.scn.time_scale,
            "duration_s": self.scn.duration_s, "warmup_s": self.scn.warmup_s, "slo_ms": SLO_MS,
            "status": "running",
            "profile": self.profile.name, "started": time.time(), "problems": self.problems,
        }
        self._write_info()

    def _write_info(self) -> None:
        self.dir.info.write_text(json.dumps(self.info, indent=1, default=str))

    def problem(self, text: str) -> None:
        self.problems.append(text)
        append_jsonl(self.dir.events, {"t": time.time(), "kind": "problem", "detail": text})

    def event(self, row: dict[str, Any]) -> None:
        append_jsonl(self.dir.events, row)

    def profiles(self) -> dict[str, Any]:
        """The services' profiles (capacity, units, timing), recorded in the cell's info."""
        from testbed.profiles import load_profiles

        scn = self.scn
        profiles = load_profiles(self.base_dir / scn.service_profiles if scn.service_profiles
                                 else None)
        self.info["profiles"] = {s.name: profiles[s.name].model_dump(mode="json", exclude={"sources"})
                                 for s in scn.services}
        # the reports judge SLO violations by the thresholds the scaler and balancer use
        self.info["slo_ms"] = {**SLO_MS, **{s.name: profiles[s.name].slo_ms for s in scn.services}}
        return profiles

    def run(self) -> list[str]:
        status = "failed"
        try:
            self.profile.run_cell(self, self._main)
            status = "ok"
            if self._lost_requests():
                status = "failed"
            if self.scn.compare_sim:
                self._compare_sim()
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except TestbedError as exc:
            self.problem(str(exc))
            raise
        finally:
            self.info.update(status=status, ended=time.time())
            self._write_info()
        return self.problems

    def _lost_requests(self) -> int:
        """Requests the cell planned but the services never got to answer (the testbed gone,
        a client dead or cancelled): recorded per service in the cell's info, each a problem."""
        planned = self.info.get("planned_requests", {})
        records = read_records(self.dir.path)
        lost = {s: lost_requests(records.get(s, []), n) or 0 for s, n in planned.items()}
        self.info["lost_requests"] = lost
        for service, n in lost.items():
            if n:
                self.problem(f"{service}: {n} of {planned[service]} planned requests lost "
                             f"(never recorded, or {' or '.join(LOST_ERRORS)}; "
                             f"{len(records.get(service, []))} recorded): the cell failed")
        return sum(lost.values())

    def _compare_sim(self) -> None:
        """The same cell through the simulator, with the replicas' own profiles: the measured
        window, from the replicas the warm-up left (the simulator does not run the warm-up)."""
        from testbed.profiles import load_profiles
        from testbed.scenario.simcell import run_sim_cell

        try:
            profiles = load_profiles(self.base_dir / self.scn.service_profiles
                                     if self.scn.service_profiles else None)
            scn = after_warmup(self.scn, read_jsonl(self.dir.samples))
            results = run_sim_cell(scn, self.base_dir, seed=self.scn.seed + self.rep,
                                   cluster_profiles=profiles, like_testbed=True)
        except (ValueError, TestbedError) as exc:
            self.problem(f"simulator comparison skipped: {exc}")
            return
        out = self.dir.path.parents[2] / "sim"
        out.mkdir(exist_ok=True)
        (out / f"{self.cell.slug}-rep-{self.rep}.json").write_text(json.dumps(
            {"cell": self.cell.slug, "rep": self.rep, "services": results,
             "initial_replicas": {s.name: s.replicas for s in scn.services}}, indent=1))

    def iperf_jobs(self, wall: float) -> list[IperfJob]:
        return [IperfJob(slice=x.slice, flows=x.flows, duration_s=max(1.0, wall + 1),
                         reverse=x.direction == "downlink",
                         out=self.dir.iperf / f"{x.slice}-{x.direction}.json")
                for x in self.scn.cross_traffic if x.flows > 0]

    def client_jobs(self, cluster: ClusterBackend) -> list[ClientJob]:
        """The clients' command lines (the warm-up first, then the measured window); records in
        the cell's info how many requests each service's schedules plan and how many of each
        client's first requests fall in the warm-up, from the same numbers the clients are given."""
        from testbed.load.trace import constant_schedule, load_trace, schedule_from_trace

        scn = self.scn
        ts = scn.time_scale
        warm = scn.warmup_s
        seconds = scn.duration_s + warm
        jobs = []
        planned = self.info.setdefault("planned_requests", {s.name: 0 for s in scn.services})
        warmup = self.info.setdefault("warmup_requests", {})

        def given(x: float) -> float:  # the value a client parses from its argument
            return float(f"{x:g}")

        for i, c in enumerate(scn.clients):
            # errors are the service's, judged by the expectations: the client never fails on them
            args = ["--timeout", f"{4.0 / ts:g}", "--seed", str(scn.seed + 1000 * self.rep + i),
                    "--max-error-rate", "1"]
            trace = None
            if c.trace:
                trace = trace_dir(scn, self.base_dir) / c.trace
                start = c.start_s - warm  # the warm-up replays the trace before the window
                args += ["--ratio", f"{c.ratio:g}", "--shift", f"{c.shift_hours:g}",
                         "--start", f"{start:g}", "--duration", f"{seconds:g}",
                         "--speedup", f"{ts:g}"]
                plan = schedule_from_trace(load_trace(trace), given(c.ratio), given(c.shift_hours),
                                           given(start), given(seconds), given(ts))
            else:
                args += ["--rate", f"{c.rate * ts:g}", "--duration", f"{seconds / ts:g}"]
                plan = constant_schedule(given(c.rate * ts), given(seconds / ts))
            offsets = list(plan)
            planned[c.service] = planned.get(c.service, 0) + len(offsets)
            out = self.dir.requests / f"{c.service}-{c.ue_group}-{i}.jsonl"
            # the client numbers its requests from 1 in schedule order: these first ones are warm-up
            warmup[out.name] = sum(1 for t in offsets if t < warm / ts - 1e-9)
            jobs.append(ClientJob(
                index=i, service=c.service, ue_group=c.ue_group, url=cluster.endpoint(c.service),
                out=out, args=tuple(args), trace=trace))
        return jobs

    async def _main(self, b: CellBackends) -> None:
        from testbed.scaler.loop import ScalerLoop
        from testbed.scaler.policies import make_policy

        scn = self.scn
        ts = scn.time_scale
        clock = b.clock
        self.view.set_phase(self.cell, self.rep, "starting replicas")
        await b.wait_ready(300)
        warm = scn.warmup_s
        wall = (scn.duration_s + warm) / ts
        traffic = b.traffic
        try:
            for p in await traffic.start_iperf(self.iperf_jobs(wall)):
                self.problem(p)
            for p in await traffic.start_clients(self.client_jobs(b.cluster)):
                self.problem(p)
            policies = self._policies(self.profiles(), make_policy)
            period = scn.scaler_period_s / ts
            latest: dict[str, Any] = {}
            loop = ScalerLoop(b.cluster, policies, lambda s: latest[s], clock=clock.time)
            # clients take a moment to start (Python, imports): the warm-up, the samples and the
            # scaler periods begin with the first request, the measured window after the warm-up
            await self._first_arrival(b, timeout_s=60)
            t0 = clock.monotonic()
            self.info["load_started"] = clock.time()
            self.info["measure_started"] = self.info["load_started"] + warm / ts
            step = b.sample_every_s / ts
            next_sample, next_decision = t0 + step, t0 + period
            self.view.set_phase(self.cell, self.rep,
                                f"running ({warm:g} s warm-up first)" if warm else "running", wall)
            while clock.monotonic() - t0 < wall + 5 and (
                    traffic.clients_running()
                    or _end_decision_due(clock.monotonic() - t0, next_decision - t0, wall, period)):
                await clock.sleep(min(0.1, 0.5 / ts))
                now = clock.monotonic()
                # rows carry t from the measured window's start (negative in the warm-up) and are
                # marked warm-up by when they were due: a decision due at the warm-up's end
                # rewards a period of the warm-up
                t = (now - t0) * ts - warm
                if now >= next_sample:
                    mark = _warmup_mark((next_sample - t0) * ts, warm)
                    next_sample += step
                    await self._sample(b, now - t0, t, mark)
                if now >= next_decision:
                    mark = _warmup_mark((next_decision - t0) * ts, warm)
                    next_decision += period
                    if b.probe is not None:  # what the replicas run, before the next change
                        for row in await b.probe():
                            append_jsonl(self.dir.replicas, {"t": t, **row, **mark})
                    latest.update(await _windows(b.metrics, scn.scaler_period_s))
                    for d in loop.decide_all():  # a shared target policy plans its services together
                        append_jsonl(self.dir.decisions, {**asdict(d), "t": t, **mark})
                self.view.tick(now - t0)
        finally:
            self.info["measured_s"] = scn.duration_s
            for p in await traffic.stop():
                self.problem(p)
            self.closing = True

    def _policies(self, profiles: dict[str, Any], make_policy: Any) -> dict[str, Any]:
        """One policy per service; fa2, gslice, inss and ddpg are one object over the services
        that use them (inss/ddpg: the services their model was trained for, checked at load)."""
        from testbed.scaler.fa2 import Fa2Policy, Pipeline
        from testbed.scaler.gslice import EqualSharePolicy
        from testbed.scaler.share import SharePolicy, default_model, read_share_meta

        scn = self.scn
        source = str(self.base_dir / scn.service_profiles) if scn.service_profiles else \
            "testbed/profiles/services.yaml"
        out: dict[str, Any] = {}
        for kind in ("fa2", "gslice"):
            mine = {s.name: profiles[s.name] for s in scn.services if s.policy == kind}
            if not mine:
                continue
            if kind == "fa2":
                pipes = [Pipeline(tuple(p.services), p.sla_ms) for p in scn.pipelines]
                shared = Fa2Policy(mine, pipelines=pipes, profile_source=source)
            else:
                shared = EqualSharePolicy(mine, profile_source=source)
            out.update(dict.fromkeys(mine, shared))
        for kind in ("inss", "ddpg"):
            users = [s for s in scn.services if s.policy == kind]
            if not users:
                continue
            path = self.base_dir / users[0].model if users[0].model else default_model(kind)
            order = read_share_meta(path).services  # the actor's inputs come in its training order
            policy = SharePolicy.load(path, {name: profiles[name] for name in order},
                                      profile_source=source)
            self.info.setdefault("models", {})[kind] = str(path)
            out.update(dict.fromkeys(order, policy))
        for s in scn.services:
            if s.name not in out:
                out[s.name] = make_policy(s.policy, s.name, total_units=scn.total_units,
                                          seed=scn.seed + self.rep,
                                          model=str(self.base_dir / s.model) if s.model else None)
        return {s.name: out[s.name] for s in scn.services}

    async def _first_arrival(self, b: CellBackends, timeout_s: float) -> None:
        if not self.scn.clients or not b.wait_first_request:
            return
        deadline = b.clock.monotonic() + timeout_s
        while b.clock.monotonic() < deadline:
            if any([(await _totals(b.metrics, s.name))[0] for s in self.scn.services]):
                return
            if not b.traffic.clients_running():
                self.problem("every client exited before sending a request (see logs/)")
                return
            await b.clock.sleep(b.poll_s)
        self.problem(f"no request reached the services within {timeout_s:g} s")

    async def _sample(self, b: CellBackends, elapsed: float, t: float,
                      mark: dict[str, bool]) -> None:
        """Per sample (every scenario second locally): replicas and cumulative counters (rates
        are their differences); `t` in scenario seconds from the measured window's start."""
        win = await _windows(b.metrics, 5.0)
        rows = []
        for s in self.scn.services:
            w = win.get(s.name)
            arrivals, violations = await _totals(b.metrics, s.name)
            ready, desired = b.cluster.ready_replicas(s.name), b.cluster.desired_replicas(s.name)
            append_jsonl(self.dir.samples, {
                "t": t, **mark, "service": s.name, "ready": ready,
                "desired": desired, "arrivals_total": arrivals,
                "violations_total": violations,
                "utilization": w.utilization if w else 0.0,
                "mean_latency_ms": w.mean_proc_time_ms if w else None})
            rows.append((s.name, w, ready, desired))
        self.view.update(rows, elapsed)


def after_warmup(scn: Scenario, samples: list[dict[str, Any]]) -> Scenario:
    """The scenario with each service's initial replicas set to those the cell's warm-up left
    (its last warm-up sample's desired replicas, which hold the units); unchanged without one."""
    left = {s["service"]: s["desired"] for s in samples if s.get("warmup")}
    if not scn.warmup_s or not left:
        return scn
    services = [s.model_copy(update={"replicas": max(1, int(left.get(s.name, s.replicas)))})
                for s in scn.services]
    return scn.model_copy(update={"services": services})


def _end_decision_due(elapsed: float, next_due: float, wall: float, period: float) -> bool:
    """The decision due at the window's end (it rewards the window's last period) is still to
    come: the clients, started a moment before the runner's clock, may finish just before it.
    Without this a cell kept or lost its last reward period by that race (3 or 4 decisions in
    2 minutes)."""
    return elapsed > wall - period and next_due <= wall + 1e-6


def _warmup_mark(due_s: float, warmup_s: float) -> dict[str, bool]:
    """`{"warmup": True}` for a row due (scenario seconds from the load's start) within the
    warm-up; nothing for a measured one, as rows were before warm-ups existed."""
    return {"warmup": True} if warmup_s and due_s <= warmup_s + 1e-6 else {}


async def _windows(metrics: Any, seconds: float) -> dict[str, Any]:
    """A source that asks a server (Prometheus) does so off the loop: on the local profile the
    loop also runs the load balancer, which a blocking query would stall."""
    if hasattr(metrics, "windows_async"):
        return await metrics.windows_async(seconds)
    return metrics.windows(seconds)


async def _totals(metrics: Any, service: str) -> tuple[int, int]:
    if hasattr(metrics, "totals_async"):
        return await metrics.totals_async(service)
    return metrics.totals(service)
