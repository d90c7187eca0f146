"""One repetition of one cell, from start to records: through the simulator (`engine: sim`), or
on any profile, which supplies the cluster, metrics and traffic backends this drives.

Replicas ready → iperf3 + load clients (typed jobs, `testbed.load.traffic`) → a sample every
scenario second (5 on the lab) and a scaler decision every period → stop → records, lost
requests and, if asked, the same cell through the simulator.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from testbed.cluster.base import ClusterBackend
from testbed.errors import TestbedError
from testbed.load.traffic import ClientJob
from testbed.metrics.host import HostMeter
from testbed.profiles import write_profiles
from testbed.scaler.loop import ScalerLoop
from testbed.scenario.backends import CellBackends, CellJob, CellOutcome, LocalProfile, Profile
from testbed.scenario.cell_traffic import iperf_jobs, load_job, open_gate_when_ready
from testbed.scenario.cellplan import CellPlan
from testbed.scenario.live import LiveView
from testbed.scenario.machine import host_line, starved_services
from testbed.scenario.results import (
    FELL_BEHIND,
    LATENESS_SLO_SHARE,
    LOST_ERRORS,
    MIN_LATE_REQUESTS,
    SLO_MS,
    behind_schedule,
    lost_requests,
    read_records,
)
from testbed.scenario.rundir import CellDir, append_jsonl, read_jsonl
from testbed.scenario.simcell import after_warmup, run_sim_cell


class CellRunner:
    """One repetition of one cell on any profile: the profile supplies the cluster, metrics and
    traffic backends; this drives them (replicas ready → iperf3 + clients → samples and a scaler
    decision every period → stop → records)."""

    def __init__(self, plan: CellPlan, rep: int, celldir: CellDir, view: LiveView,
                 profile: Profile | None = None):
        self.plan, self.rep, self.dir, self.view = plan, rep, celldir, view
        self.cell, self.base_dir = plan.cell, plan.base_dir
        self.profile = profile or LocalProfile()
        self.scn = plan.scenario
        self.scale = plan.clock  # scenario and wall time, the cell's
        self.problems: list[str] = []
        self.failures: list[str] = []  # the problems that fail the cell (`fail`)
        self.behind: dict[str, str] = {}  # per service, why its figures are the machine's
        self._meter: HostMeter | None = None  # the host's steal and waits, each wall second
        self._profiles: dict[str, Any] = {}  # the services' profiles, read as the cell starts
        self.info: dict[str, Any] = {
            "slug": self.cell.slug, "label": self.cell.label, "params": self.cell.params, "rep": rep,
            "services": [s.name for s in self.scn.services], "time_scale": self.scn.time_scale,
            "replica_work": self.scn.replica_work,
            "duration_s": self.scn.duration_s, "warmup_s": self.scn.warmup_s, "slo_ms": SLO_MS,
            "status": "running",
            "profile": self.profile.name, "started": time.time(), "problems": self.problems,
        }
        self._write_info()

    def _write_info(self) -> None:
        self.dir.info.write_text(json.dumps(self.info, indent=1, default=str))

    def problem(self, text: str) -> None:
        """Record `text` as a problem of the cell (its info and events.jsonl); the cell stays ok."""
        self.problems.append(text)
        append_jsonl(self.dir.events, {"t": time.time(), "kind": "problem", "detail": text})

    def machine(self, service: str, text: str) -> None:
        """The service's figures are the machine's (`text` says why, with the host's figures):
        the cell's status becomes "behind" (MACHINE BEHIND) unless it failed for another reason.

        service: whose figures; text: the line the run prints."""
        self.behind[service] = text
        self.info["behind"] = self.behind
        self.problem(text)

    def fail(self, text: str) -> None:
        """A problem that fails the cell: its status becomes "failed", so no check can pass on
        its rows and the run fails (a lost request does the same).

        text: what failed, as the run prints it."""
        self.failures.append(text)
        self.info["failures"] = self.failures
        self.problem(text)

    def event(self, row: dict[str, Any]) -> None:
        """Append `row` to the cell's events.jsonl."""
        append_jsonl(self.dir.events, row)

    def profiles(self) -> dict[str, Any]:
        """The services' profiles (capacity, units, timing), recorded in the cell's info."""
        scn = self.scn
        profiles = dict(self.plan.profiles)
        self.info["profiles"] = {s.name: profiles[s.name].model_dump(mode="json", exclude={"sources"})
                                 for s in scn.services}
        # the reports judge SLO violations by the thresholds the scaler and balancer use
        self.info["slo_ms"] = {**SLO_MS, **{s.name: profiles[s.name].slo_ms for s in scn.services}}
        return profiles

    def run(self) -> list[str]:
        """Run the cell's repetition on its profile's backends and write its files; returns the problems
        it recorded."""
        status = "failed"
        outcome = CellOutcome(log=self.event)
        try:
            self._profiles = self.profiles()
            job = CellJob(self.cell, self.rep, self.dir, self.view, self._profiles, self.event,
                          outcome)
            try:
                outcome = self.profile.run_cell(job, self._main)
            finally:  # what the profile found so far, after an error or Ctrl-C too
                self._take(outcome)
            status = "ok"
            if outcome.planned:
                status = "planned"  # the lab's --check: stand-ins answered, no request was sent
            else:
                records = read_records(self.dir.path)  # once: a day's run holds millions
                lost = self._lost_requests(records)
                self._behind_schedule(records)
                self._starved(records)
                if lost or self.failures:
                    status = "failed"
                elif self.behind:
                    status = "behind"  # the machine's: MACHINE BEHIND, never a pass
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

    def _take(self, outcome: CellOutcome) -> None:
        """What the profile found, into the cell's record (its problems are already events)."""
        self.info.update(outcome.info)
        self.problems += outcome.problems
        if outcome.failures:
            self.failures += outcome.failures
            self.info["failures"] = self.failures

    def _lost_requests(self, records: dict[str, list[dict[str, Any]]]) -> int:
        """Requests the cell planned but the services never got to answer (the testbed gone,
        a client dead or cancelled): recorded per service in the cell's info, each a problem.
        records: the cell's request records by service."""
        planned = self.info.get("planned_requests", {})
        lost = {s: lost_requests(records.get(s, []), n) or 0 for s, n in planned.items()}
        self.info["lost_requests"] = lost
        for service, n in lost.items():
            if n:
                self.problem(f"{service}: {n} of {planned[service]} planned requests lost "
                             f"(never recorded, or {' or '.join(LOST_ERRORS)}; "
                             f"{len(records.get(service, []))} recorded): the cell failed")
        return sum(lost.values())

    def _behind_schedule(self, records: dict[str, list[dict[str, Any]]]) -> int:
        """At a time scale: the services whose clients fell behind their schedule in the measured
        window (the machine did not hold the scale), each failing the cell with one line; returns
        how many.
        records: the cell's request records by service."""
        scn = self.scn
        if self.scale.real_time:
            return 0
        slo = self.info.get("slo_ms") or SLO_MS
        # the measured window's requests: a warm-up absorbs the clients' own start
        start = self.info.get("measure_started", 0.0) if scn.warmup_s else 0.0
        behind = 0
        for service, recs in records.items():
            recs = [r for r in recs if r.get("scheduled", 0.0) >= start]
            late = behind_schedule(recs, clock=self.scale,
                                   slo_ms=slo.get(service, SLO_MS.get(service, 1000.0)))
            if late is not None:
                behind += 1
                self.info.setdefault("behind_schedule", {})[service] = round(late, 1)
                host = host_line(self.info.get("host") or {}, "clients")
                self.machine(service, f"{service}: {FELL_BEHIND}: 1 % of their requests, and at "
                             f"least {MIN_LATE_REQUESTS}, {late:.0f} ms late or more (scenario "
                             f"time), over {LATENESS_SLO_SHARE:g} of its SLO: this machine does not "
                             f"hold time scale {scn.time_scale:g} (lower --time-scale; "
                             f"bench/time_scale.py measures it)" + (f"; {host}" if host else ""))
        return behind

    def _starved(self, records: dict[str, list[dict[str, Any]]]) -> None:
        """The services whose SLO violations fell in seconds their replicas were starved of a
        core by other work (testbed.scenario.machine): their figures are the machine's."""
        if self._meter is None:
            return
        seconds = [s.as_json() for s in self._meter.seconds]
        found = starved_services(records, seconds, self._profiles, clock=self.scale,
                                 slo_ms=self.info.get("slo_ms") or SLO_MS,
                                 since=self.info.get("measure_started", 0.0))
        for service, line in found.items():
            if service not in self.behind:
                self.info.setdefault("starved", {})[service] = line
                self.machine(service, line)

    def _compare_sim(self) -> None:
        """The same cell through the simulator, with the replicas' own profiles: the measured
        window, from the replicas the warm-up left (the simulator does not run the warm-up)."""
        try:
            profiles = self._profiles
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

    def client_jobs(self, cluster: ClusterBackend, gate: Path | None = None) -> list[ClientJob]:
        """The clients (the warm-up first, then the measured window); records in the cell's info
        how many requests each service's schedules plan and how many of each client's first
        requests fall in the warm-up, from the same numbers the clients are given.

        cluster: the cell's cluster (its service endpoints); gate: the file at which they wait
        to begin their schedules together (None: each when it is ready)."""
        scn = self.scn
        planned = self.info.setdefault("planned_requests", {s.name: 0 for s in scn.services})
        warmup = self.info.setdefault("warmup_requests", {})
        jobs = []
        changed = None  # the scenario's `profiles:` changes reach the clients as a file of their own
        if scn.profiles:
            changed = self.dir.path / "profiles.yaml"
            write_profiles(changed, {s.name: self.plan.profiles[s.name] for s in scn.services})
        for i, c in enumerate(scn.clients):
            load = replace(load_job(scn, c, i, self.rep, self.base_dir), start_gate=gate)
            if changed is not None:
                load = replace(load, profiles=changed)
            offsets = load.offsets()
            planned[c.service] = planned.get(c.service, 0) + len(offsets)
            out = self.dir.requests / f"{c.service}-{c.ue_group}-{i}.jsonl"
            # the client numbers its requests from 1 in schedule order: these first ones are warm-up
            warmup[out.name] = sum(1 for t in offsets if t < self.scale.wall(scn.warmup_s) - 1e-9)
            jobs.append(ClientJob.of(load, index=i, ue_group=c.ue_group,
                                     url=cluster.endpoint(c.service), out=out))
        return jobs

    async def _main(self, b: CellBackends) -> float | None:
        """The cell on its profile's backends; returns when its measured window began (epoch
        seconds), None when no load started."""
        scn = self.scn
        scale = self.scale
        clock = b.clock
        self.view.set_phase(self.cell, self.rep, "starting replicas")
        await b.wait_ready(300)
        warm = scn.warmup_s
        wall = scale.wall(scn.duration_s + warm)
        traffic = b.traffic
        # the policies first: loading a model (torch, sb3: seconds, once per process) blocks this
        # event loop, where the local balancer runs; after the clients had started, the first
        # requests of a DRL cell waited 3-14 s for it (docs/table-5.4.md)
        profiles = self._profiles
        policies = self._policies()
        # what this process holds by now (imports, torch and sb3 in a DRL cell, the cluster, the
        # policies) lives through the cell: kept out of the collector's full passes. With three
        # PPO models loaded one pass took 180-200 ms over 350,000 objects, and stalled this loop,
        # the balancer's, for 250-300 ms about once a cell: every request in flight timed out
        gc.collect()
        gc.freeze()
        meter = self._start_meter(b)
        try:
            start_at = await self._start_traffic(b, wall)
            latest: dict[str, Any] = {}
            loop = ScalerLoop(b.cluster, policies, lambda s: latest[s], clock=clock.time,
                              profiles=profiles)
            # clients take a moment to start (Python, imports): the warm-up, the samples and the
            # scaler periods begin with the first request, the measured window after the warm-up
            await self._first_arrival(b, timeout_s=60)
            t0 = clock.monotonic() - (0.0 if start_at is None else clock.time() - start_at)
            self.info["load_started"] = clock.time() if start_at is None else start_at
            self.info["measure_started"] = self.info["load_started"] + scale.wall(warm)
            # once, as the load begins (0.4 ms): a reader of the run directory while it runs (the
            # live page) maps the records' wall times to scenario time and splits off the warm-up
            self._write_info()
            await self._measure(b, t0, wall, loop, latest)
        finally:
            self.info["measured_s"] = scn.duration_s
            if meter is not None:
                self.info["host"] = meter.summary(since=self.info.get("measure_started"))
            for p in await traffic.stop():
                self.problem(p)
            gc.unfreeze()
        return self.info.get("measure_started")

    def _start_meter(self, b: CellBackends) -> HostMeter | None:
        """The host's meter of the cell's processes, started (None where there is nothing to meter)."""
        meter = self._meter = (HostMeter(b.processes, harness_root=os.getpid())
                               if b.processes is not None else None)
        if meter is not None and meter.available:
            meter.start()
        elif meter is not None:
            self._meter = meter = None  # no schedstat here: nothing to meter
        return meter

    async def _start_traffic(self, b: CellBackends, wall: float) -> float | None:
        """The iperf3 flows and the clients, started; returns the epoch second the clients begin
        their schedules together, None where each begins when it is ready."""
        traffic = b.traffic
        for p in await traffic.start_iperf(iperf_jobs(self.scn, self.dir.iperf, wall)):
            self.problem(p)
        # at a time scale the clients begin one schedule together: started each when ready,
        # their seconds apart would count time_scale times
        gate = (self.dir.path / "start-gate"
                if b.client_start_s is not None and not self.scale.real_time else None)
        jobs = self.client_jobs(b.cluster, gate)
        for p in await traffic.start_clients(jobs):
            self.problem(p)
        start_at = None
        if gate is not None:
            start_at = await open_gate_when_ready(b, gate, len(jobs), timeout_s=60, problem=self.problem)
        return start_at

    async def _measure(self, b: CellBackends, t0: float, wall: float, loop: ScalerLoop,
                       latest: dict[str, Any]) -> None:
        """From `t0` (the load's start, on the backends' monotonic clock): a sample every sample
        interval and a decision of `loop` every scaler period (its windows into `latest`), until
        the clients are done and the window's last decision is made, `wall` seconds on."""
        scn, scale, clock, traffic, meter = self.scn, self.scale, b.clock, b.traffic, self._meter
        warm = scn.warmup_s
        period = scale.wall(scn.scaler_period_s)
        step = scale.wall(b.sample_every_s)
        next_sample, next_decision = t0 + step, t0 + period
        self.view.set_phase(self.cell, self.rep,
                            f"running ({warm:g} s warm-up first)" if warm else "running", wall)
        while clock.monotonic() - t0 < wall + 5 and (
                traffic.clients_running()
                or _end_decision_due(clock.monotonic() - t0, next_decision - t0, wall, period)):
            # wake at the next sample or decision (a fixed poll of 0.5/ts s made them up to
            # half a scenario second late), and at least every 0.1 s for the view
            await clock.sleep(max(0.0, min(next_sample, next_decision, clock.monotonic() + 0.1)
                                  - clock.monotonic()))
            now = clock.monotonic()
            # rows carry t from the measured window's start (negative in the warm-up) and are
            # marked warm-up by when they were due: a decision due at the warm-up's end
            # rewards a period of the warm-up
            t = scale.scenario(now - t0) - warm
            if now >= next_sample:
                mark = _warmup_mark(scale.scenario(next_sample - t0), warm)
                next_sample += step
                await self._sample(b, now - t0, t, mark)
                # off the loop, where the balancer runs: /proc is read for tens of processes
                if meter is not None and meter.due() and (second := await asyncio.to_thread(
                        meter.sample, b.processes())):
                    append_jsonl(self.dir.host, {**second.as_json(), "t_s": t, **mark})
            if now >= next_decision:
                mark = _warmup_mark(scale.scenario(next_decision - t0), warm)
                next_decision += period
                await self._decide(b, loop, latest, t, mark)
            self.view.tick(now - t0)

    async def _decide(self, b: CellBackends, loop: ScalerLoop, latest: dict[str, Any], t: float,
                      mark: dict[str, bool]) -> None:
        """One scaler period's end: what the replicas run, the period's windows into `latest`,
        and `loop`'s decisions, each row at `t` (scenario seconds) with its warm-up `mark`."""
        if b.probe is not None:  # what the replicas run, before the next change
            for row in await b.probe():
                append_jsonl(self.dir.replicas, {"t": t, **row, **mark})
        latest.update(await _windows(b.scaler_metrics or b.metrics, self.scn.scaler_period_s))
        for d in loop.decide_all():  # a shared target policy plans its services together
            append_jsonl(self.dir.decisions, {**asdict(d), "t": t, **mark})

    def _policies(self) -> dict[str, Any]:
        """One policy per service, from the plan's resolved entries; the cell records the model
        file of each inss/ddpg actor."""
        built = self.plan.policies(self.rep)
        for kind, path in built.models.items():
            self.info.setdefault("models", {})[kind] = path
        return built.policies

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
                "mean_latency_ms": w.mean_latency_ms if w else None})
            rows.append((s.name, w, ready, desired))
        self.view.update(rows, elapsed)


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
