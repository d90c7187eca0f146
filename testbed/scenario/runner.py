"""Runs a scenario end to end on the local profile, cell by cell, into a run directory.

For each matrix cell and repetition: up → provision → services → iperf3 + clients → scaler loop
every period → stop → collect → down. The cell's asyncio work runs in a thread inside the
data-network namespace (`NetnsLoop`); clients run as `testbed load` processes inside their UE
group's namespace and stream their records to the cell directory, so Ctrl-C keeps them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from testbed.bringup.local import LocalTestbed, sigint_deferred
from testbed.errors import TestbedError
from testbed.net.cmd import die_with_parent
from testbed.net.iperf import IperfSession
from testbed.net.netns import NetnsLoop
from testbed.net.state import state_dir
from testbed.scenario.expect import Outcome, evaluate_all
from testbed.scenario.live import LiveView
from testbed.scenario.load import LoadedScenario
from testbed.scenario.matrix import Cell, expand
from testbed.scenario.results import SLO_MS, run_rows
from testbed.scenario.rundir import CellDir, append_jsonl, new_run_dir, write_manifest
from testbed.scenario.spec import Scenario, trace_dir


@dataclass
class RunOptions:
    out_root: Path = Path("runs")
    profile: str = "local"
    time_scale: float | None = None  # overrides the scenario's
    duration_s: float | None = None  # overrides the scenario's (a shorter window for CI)
    repetitions: int | None = None
    progress: bool = True
    console: Console | None = None
    run_dir: Path | None = None


@dataclass
class RunResult:
    run_dir: Path
    rows: list[dict[str, Any]]
    outcomes: list[Outcome]
    interrupted: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.interrupted and all(o.passed for o in self.outcomes)


def effective(loaded: LoadedScenario, options: RunOptions) -> Scenario:
    """The scenario with command-line overrides applied."""
    update: dict[str, Any] = {}
    if options.time_scale is not None:
        update["time_scale"] = options.time_scale
    if options.duration_s is not None:
        update["duration_s"] = options.duration_s
    if options.repetitions is not None:
        update["repetitions"] = options.repetitions
    return loaded.scenario.model_copy(update=update) if update else loaded.scenario


class ScenarioRun:
    """One run of a scenario: its run directory, its cells, and the results at the end.

        run = ScenarioRun(load_scenario("scenarios/smoke.yaml"), RunOptions())
        for cell in run.cells: run.run_cell(cell)
        result = run.finish()
    """

    def __init__(self, loaded: LoadedScenario, options: RunOptions | None = None):
        self.options = options or RunOptions()
        if self.options.profile != "local":
            raise TestbedError(
                f"profile {self.options.profile!r}: scenarios run on the local profile here; on "
                "a lab, bring it up with `testbed up --profile lab` and run clients against it")
        self.loaded = loaded
        self.scenario = effective(loaded, self.options)
        self.cells = expand(self.scenario, loaded.testbed)
        if self.scenario.engine == "testbed":
            from testbed.bringup.local import require_root

            require_root("a testbed scenario")
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
                    problems += CellRunner(cell, rep, celldir, self.loaded.base_dir, view).run()
                except KeyboardInterrupt:
                    self.interrupted = True
                    raise
        self.problems += problems
        return problems

    def finish(self) -> RunResult:
        rows = run_rows(self.run_dir)
        outcomes = evaluate_all(self.scenario.expect, rows) if not self.interrupted else []
        (self.run_dir / "results.json").write_text(json.dumps(
            {"rows": rows, "expect": [asdict(o) for o in outcomes],
             "interrupted": self.interrupted, "problems": self.problems}, indent=1, default=str))
        return RunResult(self.run_dir, rows, outcomes, self.interrupted, self.problems)


def run_scenario(loaded: LoadedScenario, options: RunOptions | None = None) -> RunResult:
    """Every cell and repetition with a live view, then results and expectations (the caller writes
    the report: `testbed.report.write_report(result.run_dir)`)."""
    run = ScenarioRun(loaded, options)
    view = LiveView(run.console, run.cells, run.scenario.repetitions,
                    enabled=run.options.progress)
    with view:
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
        results = run_sim_cell(scn, self.base_dir, seed=scn.seed + self.rep)
        (self.dir.path / "sim.json").write_text(json.dumps(results, indent=1))
        info.update(status="ok", ended=time.time(), problems=[])
        self.dir.info.write_text(json.dumps(info, indent=1))
        return []


class CellRunner:
    """One repetition of one cell: owns its testbed, cluster, clients and iperf3 sessions."""

    def __init__(self, cell: Cell, rep: int, celldir: CellDir, base_dir: Path, view: LiveView):
        self.cell, self.rep, self.dir, self.base_dir, self.view = cell, rep, celldir, base_dir, view
        self.scn = cell.scenario
        self.problems: list[str] = []
        self.info: dict[str, Any] = {
            "slug": cell.slug, "label": cell.label, "params": cell.params, "rep": rep,
            "services": [s.name for s in self.scn.services], "time_scale": self.scn.time_scale,
            "duration_s": self.scn.duration_s, "slo_ms": SLO_MS, "status": "running",
            "started": time.time(), "problems": self.problems,
        }
        self._write_info()

    def _write_info(self) -> None:
        self.dir.info.write_text(json.dumps(self.info, indent=1, default=str))

    def problem(self, text: str) -> None:
        self.problems.append(text)
        append_jsonl(self.dir.events, {"t": time.time(), "kind": "problem", "detail": text})

    def run(self) -> list[str]:
        # a fresh name per cell: runs never collide with a testbed the user has up
        name = "r" + secrets.token_hex(3)
        spec = self.cell.testbed.model_copy(update={"name": name})
        # the subscriber store holds every UE's K/OPc: kept beside the state file, not in the
        # run directory that users share, and removed by the testbed's down
        tb = LocalTestbed(spec, provision=True, store_dir=state_dir() / f"{name}.store")
        status = "failed"
        # printed before anything is built: after a crash or SIGKILL, `down` needs this name
        self.view.log(f"cell {self.cell.index + 1} ({self.cell.label}), rep {self.rep + 1}: "
                      f"testbed {name} (if left behind: testbed down --name {name})")
        try:
            tb.up()
            self.info["testbed"] = {"name": name, "namespaces": tb.topology.namespaces}
            self.info["provisioned"] = tb.provisioned
            job = NetnsLoop(tb.topology.dn.name, lambda: self._main(tb))
            job.start()
            try:
                while not job.join(0.25):
                    self.view.refresh()
            except KeyboardInterrupt:
                self.view.note("interrupted: stopping clients, keeping what was collected…")
                job.cancel()
                with sigint_deferred():
                    job.join()
                status = "interrupted"
                raise
            job.result()
            status = "ok"
            if self.scn.compare_sim:
                self._compare_sim()
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except TestbedError as exc:
            self.problem(str(exc))
            raise
        finally:
            with sigint_deferred():
                tb.down()
            self.info.update(status=status, ended=time.time())
            self._write_info()
        return self.problems

    def _compare_sim(self) -> None:
        """The same cell through the simulator, with the replicas' own profiles."""
        from testbed.profiles import load_profiles
        from testbed.scenario.simcell import run_sim_cell

        try:
            profiles = load_profiles(self.base_dir / self.scn.service_profiles
                                     if self.scn.service_profiles else None)
            results = run_sim_cell(self.scn, self.base_dir, seed=self.scn.seed + self.rep,
                                   cluster_profiles=profiles, like_testbed=True)
        except (ValueError, TestbedError) as exc:
            self.problem(f"simulator comparison skipped: {exc}")
            return
        out = self.dir.path.parents[2] / "sim"
        out.mkdir(exist_ok=True)
        (out / f"{self.cell.slug}-rep-{self.rep}.json").write_text(json.dumps(
            {"cell": self.cell.slug, "rep": self.rep, "services": results}, indent=1))

    async def _main(self, tb: LocalTestbed) -> None:
        from testbed.cluster.local import LocalCluster
        from testbed.scaler.loop import ScalerLoop
        from testbed.scaler.policies import make_policy

        scn = self.scn
        ts = scn.time_scale
        events = self.dir.events

        closing = False

        def on_event(ev: Any) -> None:
            row = asdict(ev)
            append_jsonl(events, row)
            # replicas stopped by the cell's own shutdown are not failures
            if row.get("kind") in ("died", "failed_to_start") and not closing:
                self.problem(f"replica {row.get('replica')} of {row.get('service')} "
                             f"{row.get('kind')}: {row.get('detail', '')}")

        from testbed.profiles import load_profiles

        profiles = load_profiles(self.base_dir / scn.service_profiles if scn.service_profiles
                                 else None)
        self.info["profiles"] = {s.name: profiles[s.name].model_dump(mode="json")
                                 for s in scn.services}
        cluster = LocalCluster(
            profiles=profiles,
            services=[s.name for s in scn.services],
            initial={s.name: s.replicas for s in scn.services},
            total_units=scn.total_units, time_scale=ts, host=str(tb.topology.dn_addr),
            log_dir=self.dir.logs, seed=scn.seed + self.rep, on_event=on_event)
        async with cluster:
            self.view.set_phase(self.cell, self.rep, "starting replicas")
            await cluster.wait_ready(timeout_s=300)
            wall = scn.duration_s / ts
            sessions = await asyncio.to_thread(self._start_iperf, tb, wall)
            clients = await self._start_clients(tb, cluster)
            policies = {s.name: make_policy(s.policy, s.name, total_units=scn.total_units,
                                            seed=scn.seed + self.rep,
                                            model=str(self.base_dir / s.model) if s.model else None)
                        for s in scn.services}
            period = scn.scaler_period_s / ts
            latest: dict[str, Any] = {}
            loop = ScalerLoop(cluster, policies, lambda s: latest[s], clock=time.time)
            # clients take a moment to start (Python, imports): the measured window, the
            # samples and the scaler periods begin with the first request
            await self._first_arrival(cluster, clients, timeout_s=60)
            t0 = time.monotonic()
            self.info["measure_started"] = time.time()
            next_sample, next_decision = t0 + 1.0 / ts, t0 + period
            self.view.set_phase(self.cell, self.rep, "running", wall)
            try:
                while time.monotonic() - t0 < wall + 5 and any(p.returncode is None
                                                               for p in clients):
                    await asyncio.sleep(min(0.1, 0.5 / ts))
                    now = time.monotonic()
                    if now >= next_sample:
                        next_sample += 1.0 / ts
                        self._sample(cluster, now - t0)
                    if now >= next_decision:
                        next_decision += period
                        latest.update(cluster.window(scn.scaler_period_s))
                        for s in scn.services:
                            d = loop.decide(s.name)
                            append_jsonl(self.dir.decisions, {**asdict(d), "t": (now - t0) * ts})
                    self.view.update(cluster, now - t0)
            finally:
                self.info["measured_s"] = scn.duration_s
                await self._stop_clients(clients)
                await asyncio.to_thread(self._finish_iperf, sessions)
                closing = True

    async def _first_arrival(self, cluster: Any, clients: list[Any], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and clients:
            if any(self._totals(cluster, s.name)[0] for s in self.scn.services):
                return
            if all(p.returncode is not None for p in clients):
                self.problem("every client exited before sending a request (see logs/)")
                return
            await asyncio.sleep(0.02)
        if clients:
            self.problem(f"no request reached the services within {timeout_s:g} s")

    @staticmethod
    def _totals(cluster: Any, service: str) -> tuple[int, int]:
        coll = cluster.lb.services[service].collector
        return coll.total_arrivals, coll.total_violations

    def _sample(self, cluster: Any, elapsed: float) -> None:
        """Per scenario second: replicas and cumulative counters (rates are their differences)."""
        win = cluster.window(5.0)
        ts = self.scn.time_scale
        for s in self.scn.services:
            w = win.get(s.name)
            arrivals, violations = self._totals(cluster, s.name)
            append_jsonl(self.dir.samples, {
                "t": elapsed * ts, "service": s.name, "ready": cluster.ready_replicas(s.name),
                "desired": cluster.desired_replicas(s.name), "arrivals_total": arrivals,
                "violations_total": violations,
                "utilization": w.utilization if w else 0.0,
                "mean_latency_ms": w.mean_proc_time_ms if w else None})

    def _start_iperf(self, tb: LocalTestbed, wall: float) -> list[tuple[Any, IperfSession]]:
        sessions = []
        for x in self.scn.cross_traffic:
            if x.flows <= 0:
                continue
            try:
                sessions.append((x, IperfSession.start(
                    tb.topology, x.slice, flows=x.flows, duration=max(1.0, wall + 1),
                    reverse=x.direction == "downlink", ue_index=1)))
            except TestbedError as exc:
                self.problem(f"iperf3 in slice {x.slice} did not start: {exc}")
        return sessions

    def _finish_iperf(self, sessions: list[tuple[Any, IperfSession]]) -> None:
        for x, session in sessions:
            try:
                result = session.wait(timeout=30)
            except TestbedError as exc:
                self.problem(f"iperf3 in slice {x.slice} failed: {exc}")
                continue
            finally:
                session.stop()
            (self.dir.iperf / f"{x.slice}-{result.direction}.json").write_text(
                json.dumps(result.raw))

    async def _start_clients(self, tb: LocalTestbed, cluster: Any
                             ) -> list[asyncio.subprocess.Process]:
        scn = self.scn
        ts = scn.time_scale
        procs = []
        for i, c in enumerate(scn.clients):
            ues = tb.topology.ues_of_group(c.ue_group)
            ue = ues[i % len(ues)]
            out = self.dir.requests / f"{c.service}-{c.ue_group}-{i}.jsonl"
            argv = [sys.executable, "-m", "testbed", "load", c.service,
                    "--url", cluster.endpoint(c.service), "--out", str(out), "--quiet",
                    "--slice", ue.slice, "--source", str(ue.address),
                    "--timeout", f"{4.0 / ts:g}", "--seed", str(scn.seed + 1000 * self.rep + i)]
            if c.trace:
                argv += ["--trace", str(trace_dir(scn, self.base_dir) / c.trace),
                         "--ratio", f"{c.ratio:g}", "--shift", f"{c.shift_hours:g}",
                         "--start", f"{c.start_s:g}", "--duration", f"{scn.duration_s:g}",
                         "--speedup", f"{ts:g}"]
            else:
                argv += ["--rate", f"{c.rate * ts:g}", "--duration", f"{scn.duration_s / ts:g}"]
            log = (self.dir.logs / f"client-{i}.log").open("wb")
            procs.append(await asyncio.create_subprocess_exec(
                "ip", "netns", "exec", ue.host.name, *argv, stdout=log, stderr=log,
                start_new_session=True, preexec_fn=die_with_parent()))  # no orphans after SIGKILL
            log.close()
        return procs

    async def _stop_clients(self, procs: list[asyncio.subprocess.Process]) -> None:
        for p in procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGINT)  # clients flush their records on SIGINT
        for i, p in enumerate(procs):
            try:
                rc = await asyncio.wait_for(p.wait(), 10)
            except TimeoutError:
                p.kill()
                rc = await p.wait()
            if rc not in (0, -signal.SIGINT, 130):
                self.problem(f"client {i} exited with {rc} (see logs/client-{i}.log)")
