"""A scenario's cross-references, checked once each field is valid: names that must exist, files
that must be there, and a warm-up and a way of measuring that fit its engine."""

from __future__ import annotations

from pathlib import Path

from testbed.config import TestbedSpec, check_testbed
from testbed.profiles import load_profiles
from testbed.profiles.registry import known_services
from testbed.scenario.spec import Scenario, trace_dir
from testbed.sim.measure import DEFAULT_MEASURE


def check_scenario(scn: Scenario, testbed: TestbedSpec, base_dir: Path) -> list[tuple[tuple, str]]:
    """Cross-references: names that must exist, files that must be there.

    scn: the scenario; testbed: its resolved testbed; base_dir: the scenario's folder. Returns
    (field path, message) pairs."""
    problems, seen = _check_services(scn, base_dir)
    problems += _check_pipelines(scn, seen)
    problems += _check_profiles(scn, base_dir)
    problems += _check_warmup(scn)
    problems += _check_measure(scn)
    problems += _check_traffic(scn, testbed, base_dir, seen)
    problems += [(("testbed", *p), m) for p, m in check_testbed(testbed)]
    return problems


def _check_services(scn: Scenario, base_dir: Path) -> tuple[list[tuple[tuple, str]], set[str]]:
    """Each service listed once, its model file there; returns the problems and the names seen."""
    problems: list[tuple[tuple, str]] = []
    seen: set[str] = set()
    models: set[str] = set()
    for i, s in enumerate(scn.services):
        if s.name in seen:
            problems.append((("services", i, "name"), f"service {s.name!r} listed twice"))
        seen.add(s.name)
        if s.model and s.model not in models and not (base_dir / s.model).is_file():
            models.add(s.model)  # named once, where it first appears
            problems.append((("services", i, "model"), f"model file {s.model!r} not found"))
    return problems, seen


def _check_pipelines(scn: Scenario, seen: set[str]) -> list[tuple[tuple, str]]:
    """Each stage a listed service (`seen`), in one pipeline once; on the simulator, a chain it can
    route."""
    problems: list[tuple[tuple, str]] = []
    staged: dict[str, int] = {}
    for i, pipe in enumerate(scn.pipelines):
        for j, name in enumerate(pipe.services):
            if name not in seen:
                problems.append((("pipelines", i, "services", j), f"no service {name!r} in `services:`"))
            elif name in staged:
                problems.append((("pipelines", i, "services", j),
                                 f"{name} is already a stage of pipelines[{staged[name]}]: a service "
                                 "is in one pipeline, once"))
            staged.setdefault(name, i)
    if scn.engine == "sim" and scn.pipelines:
        # the simulator routes a chain: a later stage's requests are the stage before's completions
        later = {name: i for i, p in enumerate(scn.pipelines) for name in p.services[1:]}
        for i, c in enumerate(scn.clients):
            if c.service in later:
                chain = " -> ".join(scn.pipelines[later[c.service]].services)
                problems.append((("clients", i, "service"),
                                 f"{c.service} is a later stage of pipelines[{later[c.service]}] "
                                 f"({chain}): the simulator feeds it the stage before's completed "
                                 "requests, so it takes no client of its own; remove this client"))
        heads = {c.service for c in scn.clients}
        for i, p in enumerate(scn.pipelines):
            if p.services and p.services[0] not in heads and p.services[0] in seen:
                problems.append((("pipelines", i, "services", 0),
                                 f"the first stage {p.services[0]} has no client: the pipeline "
                                 "would see no requests"))
        if scn.total_units % 4:
            problems.append((("total_units",), "a routed pipeline runs on the GPU simulator: "
                                               "total_units must be whole GPUs (a multiple of 4)"))
    return problems


def _check_profiles(scn: Scenario, base_dir: Path) -> list[tuple[tuple, str]]:
    """The scenario's profile file there, and every service one it (or the registry) knows."""
    problems: list[tuple[tuple, str]] = []
    profiles = None
    if scn.service_profiles:
        if not (base_dir / scn.service_profiles).is_file():
            problems.append((("service_profiles",),
                             f"profile file {scn.service_profiles!r} not found"))
        else:
            profiles = load_profiles(base_dir / scn.service_profiles)  # its own errors name its lines
    if profiles is not None or not scn.service_profiles:
        known = profiles if profiles is not None else load_profiles()
        for i, s in enumerate(scn.services):
            if s.name not in known:
                problems.append((("services", i, "name"), f"unknown service {s.name!r}: "
                                 f"{known_services(known, scn.service_profiles)}"))
    return problems


def _check_traffic(scn: Scenario, testbed: TestbedSpec, base_dir: Path, seen: set[str]
                   ) -> list[tuple[tuple, str]]:
    """Each client's service listed (`seen`), its UE group on the testbed and its trace file there;
    each cross-traffic's slice on the testbed."""
    problems: list[tuple[tuple, str]] = []
    groups = {g.name for g in testbed.ue_groups}
    slices = {s.name for s in testbed.slices}
    traces = trace_dir(scn, base_dir)
    for i, c in enumerate(scn.clients):
        if c.service not in seen:
            problems.append((("clients", i, "service"),
                             f"no service {c.service!r} in `services:` ({', '.join(sorted(seen))})"))
        if scn.engine == "testbed" and c.ue_group is None:
            problems.append((("clients", i), "a client on the testbed engine needs `ue_group:`"))
        elif scn.engine == "testbed" and c.ue_group not in groups:
            problems.append((("clients", i, "ue_group"),
                             f"no UE group {c.ue_group!r} (groups: {', '.join(sorted(groups))})"))
        if c.trace and not (traces / c.trace).is_file():
            problems.append((("clients", i, "trace"), f"trace file {traces / c.trace} not found"))
    for i, x in enumerate(scn.cross_traffic):
        if x.slice not in slices:
            problems.append((("cross_traffic", i, "slice"),
                             f"no slice {x.slice!r} (slices: {', '.join(sorted(slices))})"))
    return problems


def _check_measure(scn: Scenario) -> list[tuple[tuple, str]]:
    """A way of measuring other than the harness's reads the DRAFAS simulator's periods, not the
    GPU simulator's a routed pipeline needs; the testbed engine reads it from Prometheus."""
    if scn.measure != DEFAULT_MEASURE and scn.pipelines:
        return [(("measure",), f"measure: {scn.measure} reads the DRAFAS simulator's periods; a "
                               "routed pipeline runs on the GPU simulator, which reads them the "
                               f"harness's way (measure: {DEFAULT_MEASURE})")]
    return []


def _check_warmup(scn: Scenario) -> list[tuple[tuple, str]]:
    """A warm-up is whole scaler periods (each reward period is warm-up or measured, never both)
    of the trace before each client's window, on the engine that has replicas to start."""
    if not scn.warmup_s:
        return []
    problems: list[tuple[tuple, str]] = []
    if scn.engine == "sim":
        problems.append((("warmup_s",), "a warm-up is for the testbed engine: the simulator's "
                                        "cells run the measured window only"))
    periods = scn.warmup_s / scn.scaler_period_s
    if abs(periods - round(periods)) > 1e-9:
        problems.append((("warmup_s",), f"{scn.warmup_s:g} s is not a whole number of scaler "
                                        f"periods ({scn.scaler_period_s:g} s): a decision's reward "
                                        "period would be part warm-up, part measured"))
    for i, c in enumerate(scn.clients):
        if c.trace and c.start_s < scn.warmup_s:
            problems.append((("clients", i, "start_s"),
                             f"the warm-up replays the {scn.warmup_s:g} s of the trace before "
                             f"start_s: start_s must be at least {scn.warmup_s:g} (here "
                             f"{c.start_s:g})"))
    return problems
