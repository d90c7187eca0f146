"""The one builder of scaling policies: every service's policy through the policy registry, with
the policies that plan shares (fa2, gslice, inss, ddpg) as one object over the services that use
them. A scenario's cell, the simulator's tables and comparisons, and a single policy by name
(`make_policy`) all build here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles import ServiceProfile
from testbed.scaler.fa2 import Pipeline
from testbed.scaler.registry import BuildArgs, PolicyEntry, resolve


@dataclass(frozen=True)
class PolicyChoice:
    """The policy a service runs, the model file it loads, if any (already resolved), and its
    own arguments (a scenario's `policy_args:`)."""

    service: str
    policy: str
    model: Path | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class BuiltPolicies:
    """One policy per service, in the services' order, and the model file each actor kind
    loaded (`{"ddpg": ".../ddpg.zip"}`)."""

    policies: dict[str, Any]
    models: dict[str, str] = field(default_factory=dict)


def build_policies(choices: Sequence[PolicyChoice], profiles: Mapping[str, ServiceProfile] | None, *,
                   total_units: int, seed: int, pipelines: Sequence[Pipeline] = (),
                   profile_source: str = "", base_dir: Path | None = None,
                   entries: Mapping[str, PolicyEntry] | None = None) -> BuiltPolicies:
    """Every service's policy: a policy that plans shares is built once over the services that
    chose it (a trained actor over the services its model was trained for, checked at load), the
    rest one per service. A `module:Class` is imported from `base_dir` (the scenario's folder).

    choices: each service's policy choice; profiles: the services' profiles (None: the service
    registry's); total_units: the cluster's units; seed: for random policies; pipelines: fa2's
    chains; profile_source: the profile file errors name; entries: the choices' policies already
    resolved by name (a run's `CellPlan`), else resolved here."""
    out: dict[str, Any] = {}
    models: dict[str, str] = {}
    args = BuildArgs(total_units=total_units, seed=seed, profiles=profiles, pipelines=pipelines,
                     profile_source=profile_source or BuildArgs.profile_source)
    groups: dict[str, list[PolicyChoice]] = {}
    for c in choices:
        groups.setdefault(c.policy, []).append(c)
    entries = {name: (entries or {}).get(name) or resolve(name, base_dir=base_dir)
               for name in groups}
    for c in choices:
        problem = entries[c.policy].options_problem(c.options)
        if problem:
            raise ConfigError([ConfigProblem(profile_source or "<policy>", None,
                                             f"{c.service}: policy_args", problem)])
    for name, entry in entries.items():  # first the planners: an actor takes its model's services
        if entry.plan is not None:
            model = groups[name][0].model or entry.default_model
            options = dict(groups[name][0].options)
            if any(dict(c.options) != options for c in groups[name]):
                raise ConfigError([ConfigProblem(profile_source or "<policy>", None, "policy_args",
                                                 f"{name} plans its services together: give them "
                                                 "the same policy_args")])
            out.update(entry.plan([c.service for c in groups[name]],
                                  replace(args, model=model, options=options)))
            if model is not None:
                models[name] = str(model)
    for c in choices:
        entry = entries[c.policy]
        if c.service not in out and entry.build is not None:
            out[c.service] = entry.build(c.service, replace(args, model=c.model,
                                                            options=dict(c.options)))
    return BuiltPolicies({c.service: out[c.service] for c in choices}, models)


def make_policy(name: str, service: str, *, total_units: int, seed: int = 0,
                model: str | Path | None = None,
                profiles: Mapping[str, ServiceProfile] | None = None,
                base_dir: str | Path | None = None,
                options: Mapping[str, Any] | None = None) -> Any:
    """One service's policy by name or `module:Class`; `ppo` loads `model` (a file written by
    `testbed train`); the rules read their thresholds from the service's profile in `profiles`
    (default: the service registry's).

    Raises:
        ConfigError: an unknown or broken policy, or one that plans shares for several services
            (build those with `build_policies`).

    name: the policy; service: the service it scales; total_units: the units its rules count room
    in; seed: for random policies; base_dir: where a `module:Class` is imported from; options:
    the policy's own arguments (a scenario's `policy_args:`).
    """
    entry = resolve(name, base_dir=base_dir)
    if entry.build is None:
        raise ConfigError([ConfigProblem(
            "<policy>", None, "policy",
            f"{name} sets MPS shares and batch sizes, so it runs on the GPU simulator: testbed sim "
            f"compare --policies {name} (or a scenario on the testbed engine)")])
    problem = entry.options_problem(dict(options or {}))
    if problem:
        raise ConfigError([ConfigProblem("<policy>", None, "policy_args", problem)])
    choice = PolicyChoice(service, name, Path(model) if model else None, dict(options or {}))
    return build_policies([choice], profiles, total_units=total_units, seed=seed,
                          entries={name: entry}).policies[service]
