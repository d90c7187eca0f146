"""Each cell's policies, checked before anything runs: a `module:Class` that imports, the
`policy_args:` it takes, a trained agent for its own service, and the share planners' models and
GPU curves."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from testbed.errors import ConfigError
from testbed.plugins import is_ref
from testbed.scaler import registry
from testbed.scaler.ppo import read_manifest
from testbed.scaler.share import read_share_meta
from testbed.scenario.spec import Scenario, ServiceSpec


def _sets_shares(policy: str) -> bool:
    return not is_ref(policy) and registry.resolve(policy).sets_shares


def check_policies(scn: Scenario, base_dir: Path, params: dict[str, Any] | None = None,
                   profiles: Mapping[str, Any] | None = None) -> list[tuple[tuple, str]]:
    """Every policy of a cell: a `module:Class` imported from the scenario's folder (a module that
    fails to import, a missing class or one with no `act`), and one that sets MPS shares where it
    cannot (the simulator engine, a service without a `gpu:` curve), each a problem at its line
    (the matrix key's where the cell's policy comes from the matrix).

    scn: the scenario (or a cell's); base_dir: where modules are imported from; params: the cell's
    matrix values; profiles: the cell's service profiles (None: the gpu curve is not checked)."""
    problems: list[tuple[tuple, str]] = []
    swept = [k for k in (params or {}) if k == "policy" or k.endswith(".policy")]
    for i, s in enumerate(scn.services):
        where = ("matrix", swept[0]) if swept else ("services", i, "policy")
        if not is_ref(s.policy):
            problems += [(where, m) for m in _share_problems(scn, s, profiles)]
            problems += _agent_problems(s, i, base_dir)
            problems += _options_problems(registry.resolve(s.policy), s, i, where, swept)
            continue
        try:
            entry = registry.resolve(s.policy, base_dir=base_dir)
        except ConfigError as exc:
            problems.append((where, exc.problems[0].message))
            continue
        problems += _options_problems(entry, s, i, where, swept)
    return problems


def _options_problems(entry: registry.PolicyEntry, s: ServiceSpec, i: int, where: tuple,
                      swept: list[str]) -> list[tuple[tuple, str]]:
    """`policy_args:` the service's policy does not take, at its line (the matrix key's where the
    cell's policy comes from the matrix)."""
    problem = entry.options_problem(s.policy_args)
    if problem is None:
        return []
    return [(where if swept else ("services", i, "policy_args"), problem)]


def _agent_problems(s: ServiceSpec, i: int, base_dir: Path) -> list[tuple[tuple, str]]:
    """A trained agent of one service (ppo's `model:`) given to another: it would load only
    when the cell starts."""
    entry = registry.resolve(s.policy)
    if not (entry.needs_model and entry.build is not None and s.model):
        return []
    path = base_dir / s.model
    if not path.is_file():
        return []  # check_scenario names the missing file
    try:
        agent = read_manifest(path)["service"]
    except ConfigError as exc:
        return [(("services", i, "model"), exc.problems[0].message)]
    if agent != s.name:
        return [(("services", i, "model"),
                 f"{s.model} is an agent trained for {agent}, not {s.name}: train one with "
                 f"`testbed train {s.name} --profiles FILE --trace FILE`")]
    return []


def _share_problems(scn: Scenario, s: ServiceSpec, profiles: Mapping[str, Any] | None
                    ) -> list[str]:
    """Why a policy that sets MPS shares and batch sizes (fa2, gslice, inss, ddpg) cannot run for
    service `s` of this cell: the simulator engine runs DRAFAS's configuration (25 % slices, batch
    1), and a planner needs the service's `gpu:` curve (its batch and share times)."""
    if not _sets_shares(s.policy):
        return []
    if scn.engine == "sim" or scn.compare_sim:
        return [f"{s.policy} sets shares and batches: it runs on the testbed engine (without "
                "compare_sim); on the simulator use `testbed sim compare`"]
    profile = (profiles or {}).get(s.name)
    if registry.resolve(s.policy).needs_model and not s.model:
        return []  # the shipped actor: check_share_models names the services it plans
    if profile is not None and profile.gpu is None:
        where = f" in {scn.service_profiles}" if scn.service_profiles else ""
        return [f"{s.policy} sets shares and batches from the service's GPU curve, and "
                f"{s.name}'s profile{where} has none: give it `gpu: default` (the built-in "
                "curve) or a `gpu:` block of its own, or choose a policy that sets no shares"]
    return []


def check_share_models(scn: Scenario, base_dir: Path, params: dict[str, Any] | None = None
                       ) -> list[tuple[tuple, str]]:
    """inss/ddpg in one cell: the model file (the service's `model:`, else the shipped
    models/POLICY.zip) is a model of that policy, trained for exactly the services that use it,
    one file per policy, and the drl extra that runs it is installed.

    scn: the scenario (or a cell's); base_dir: the scenario's folder; params: the cell's matrix
    values."""
    import importlib.util


    problems: list[tuple[tuple, str]] = []
    if scn.engine == "sim":
        return problems  # check_policies refuses a share planner there, whatever its model
    from_matrix = "policy" in (params or {})
    actors = [name for name, e in registry.entries().items()
              if e.sets_shares and e.default_model is not None]  # trained actors: inss, ddpg
    for kind in actors:
        users = [(i, s) for i, s in enumerate(scn.services) if s.policy == kind]
        if not users:
            continue
        i, first = users[0]
        where = ("services", i, "model") if first.model else (
            ("matrix", "policy") if from_matrix else ("services", i, "policy"))
        files = {s.model for _, s in users}
        if len(files) > 1:
            problems.append((("services", users[1][0], "model"),
                             f"every {kind} service uses one actor: give them the same `model:`"))
            continue
        path = base_dir / first.model if first.model else registry.entries()[kind].default_model
        if not path.is_file():
            problems.append((where, f"no {kind} model at {path}: give `model:` or train one "
                                    f"with `testbed train --policy {kind}`"))
            continue
        try:
            meta = read_share_meta(path)
        except ConfigError as exc:
            problems.append((where, f"{path}: {exc.problems[0].message}"))
            continue
        names = [s.name for _, s in users]
        if meta.kind != kind:
            problems.append((where, f"{path} is a {meta.kind} model, not {kind}"))
        elif sorted(meta.services) != sorted(names):
            problems.append((where, f"the {kind} model {path.name} plans {', '.join(meta.services)} "
                                    f"together: give each of them `policy: {kind}` (here: "
                                    f"{', '.join(names)})"))
        missing = [m for m in ("stable_baselines3", "torch") if importlib.util.find_spec(m) is None]
        if missing:
            problems.append((where, f"{kind} needs the drl extra ({missing[0]} missing): "
                                    "pip install 'testbed[drl]'"))
    return problems
