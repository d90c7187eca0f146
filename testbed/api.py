"""The Python API: load and run a scenario, read its result, evaluate a policy on the simulator, and
add services and policies of one's own; the `testbed` command is a layer over these.

    import testbed
    scenario = testbed.load_scenario("my-experiment.yaml")        # or a dict
    result = testbed.run_scenario(scenario, out="runs")
    result.verdict, result.rows[0]["slo_violation_rate"]
    result.to_csv("rows.csv")
    testbed.evaluate("rule_v2", "my-service", "my-trace.txt", profiles="my-services.yaml")
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.config.yamlfile import LocatedYaml
from testbed.judge.outcome import Outcome
from testbed.judge.verdict import run_verdict
from testbed.profiles import ServiceProfile, default_profiles, load_profiles, profile_for
from testbed.profiles.registry import register_service
from testbed.report.export import request_rows, write_csv, write_jsonl
from testbed.scaler.factory import make_policy
from testbed.scaler.registry import register_policy
from testbed.scenario.load import LoadedScenario, scenario_from_yaml
from testbed.scenario.load import load_scenario as _load_file
from testbed.scenario.runner import RunOptions
from testbed.scenario.runner import run_scenario as _run

__all__ = ["Result", "evaluate", "load_scenario", "register_policy", "register_service", "run_scenario",
           "services"]


def services() -> dict[str, ServiceProfile]:
    """Every registered service's profile by name: the paper's three, installed packages' and those
    added with `register_service`."""
    return default_profiles()


def load_scenario(scenario: str | Path | Mapping[str, Any], *, base_dir: str | Path | None = None
                  ) -> LoadedScenario:
    """A scenario, validated (every error names its file, line and field).

    Args:
        scenario: a scenario file's path, or the scenario as a dict (the file's YAML, parsed).
        base_dir: where a dict's relative paths (traces, profile files, modules) live; default: the
            current folder (a file's own folder for a path).
    """
    if isinstance(scenario, str | Path):
        return _load_file(scenario)
    doc = LocatedYaml(json.loads(json.dumps(dict(scenario))), {}, "<dict>")
    return scenario_from_yaml(doc, Path(base_dir or Path.cwd()))


@dataclass
class Result:
    """A finished run: its directory, its result rows (one dict per cell, repetition and service)
    and the verdict of each `expect:` check."""

    run_dir: Path
    rows: list[dict[str, Any]]
    outcomes: list[Outcome] = field(default_factory=list)
    interrupted: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """The run's verdict word, by the rule every caller uses (testbed.judge.verdict):
        FAIL (a check fails or reads a cell without data, a cell failed, the run was interrupted),
        UNDECIDED (never a pass: `testbed run` exits 2), PASS, or NOT JUDGED without checks. A
        problem that leaves every cell ok (in `problems`) does not fail it."""
        return run_verdict(self.outcomes, self.rows, interrupted=self.interrupted).verdict

    def to_csv(self, path: str | Path, *, requests: bool = False) -> int:
        """Write the rows (or, with `requests`, every request record) as CSV; returns the count.

        path: the CSV file to write; requests: the request records instead of the rows."""
        return write_csv(request_rows(self.run_dir) if requests else self.rows, path)

    def to_jsonl(self, path: str | Path, *, requests: bool = False) -> int:
        """Write the rows (or every request record) as JSON lines; returns the count.

        path: the JSON-lines file to write; requests: the request records instead of the rows."""
        return write_jsonl(request_rows(self.run_dir) if requests else self.rows, path)


def run_scenario(scenario: LoadedScenario | str | Path | Mapping[str, Any], out: str | Path = "runs", *,
                 profile: str = "local", duration_s: float | None = None, time_scale: float | None = None,
                 repetitions: int | None = None, progress: bool = False, report: bool = True) -> Result:
    """Run every cell of a scenario and judge its `expect:` checks.

    Args:
        scenario: a loaded scenario, or what `load_scenario` takes.
        out: the folder the run directory is made in.
        profile: "local" (this machine) or "lab" (needs the lab's options: use the CLI).
        duration_s: a shorter window per cell than the scenario's.
        time_scale: another time-scale factor than the scenario's.
        repetitions: another number of repetitions than the scenario's.
        progress: show the live view on the terminal.
        report: write report.md and report.html into the run directory.
    """
    loaded = scenario if isinstance(scenario, LoadedScenario) else load_scenario(scenario)
    options = RunOptions(out_root=Path(out), profile=profile, duration_s=duration_s,
                         time_scale=time_scale, repetitions=repetitions, progress=progress)
    run = _run(loaded, options)
    if report:
        from testbed.report import write_report  # matplotlib: only when a report is asked for

        write_report(run.run_dir)
    return Result(run.run_dir, run.rows, run.outcomes, run.interrupted, run.problems)


def evaluate(policy: Any, service: str | ServiceProfile, trace: Any, *, ratio: float = 1.0,
             total_units: int = 8, seed: int = 0, profiles: str | Path | None = None,
             max_steps: int | None = None, policy_args: Mapping[str, Any] | None = None) -> Any:
    """One service alone on the simulator under a policy, over a trace (as `testbed sim eval`).

    Args:
        policy: a policy name (`rule_v2`), a `module:Class` reference, or a policy object
            (anything with `act(observation, action_mask)`).
        service: a registered service's name, or a ServiceProfile.
        trace: a trace file ('DURATION COUNT' lines) or a `testbed.load.trace.Trace`.
        ratio: the factor applied to the trace's request counts.
        total_units: the resource units of the simulated cluster.
        seed: the simulator's seed.
        profiles: a profile file whose services are added to (or change) the registry's.
        max_steps: stop after this many scaler periods.
        policy_args: the policy's own arguments, as a scenario's `policy_args:` (a name or a
            reference only).

    Returns:
        The service's `testbed.train.evaluate.ServiceResult` (SLO violation rate, instances,
        processing time, reward, steps per second).
    """
    # the simulator (numpy, and numba where installed): only when a policy is evaluated
    from testbed.load.trace import Trace, load_trace
    from testbed.train.evaluate import EvalRun
    from testbed.train.evaluate import evaluate as simulate

    known = load_profiles(profiles)
    if isinstance(service, ServiceProfile):
        known[service.name] = service
        service = service.name
    profile_for(known, service, "evaluate()")
    if not hasattr(policy, "act"):
        policy = make_policy(str(policy), service, total_units=total_units, seed=seed, profiles=known,
                             options=policy_args)
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    results = simulate({service: policy}, {service: trace}, {service: ratio}, total_units=total_units,
                       seed=seed, profiles=known, run=EvalRun(max_steps=max_steps))
    return results[service]
