"""Builds the scaling policy of every service of a cell through the policy registry, with the
policies that plan shares (fa2, gslice, inss, ddpg) as one object over the services that use them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles import ServiceProfile
from testbed.scaler.fa2 import Pipeline
from testbed.scaler.registry import BuildArgs, resolve


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


def build_policies(choices: Sequence[PolicyChoice], profiles: Mapping[str, ServiceProfile], *,
                   total_units: int, seed: int, pipelines: Sequence[Pipeline] = (),
                   profile_source: str = "", base_dir: Path | None = None) -> BuiltPolicies:
    """Every service's policy: a policy that plans shares is built once over the services that
    chose it (a trained actor over the services its model was trained for, checked at load), the
    rest one per service. A `module:Class` is imported from `base_dir` (the scenario's folder).

    choices: each service's policy choice; profiles: the services' profiles; total_units: the
    cluster's units; seed: for random policies; pipelines: fa2's chains; profile_source: the profile
    file errors name."""
    out: dict[str, Any] = {}
    models: dict[str, str] = {}
    args = BuildArgs(total_units=total_units, seed=seed, profiles=profiles, pipelines=pipelines,
                     profile_source=profile_source or BuildArgs.profile_source)
    groups: dict[str, list[PolicyChoice]] = {}
    for c in choices:
        groups.setdefault(c.policy, []).append(c)
    entries = {name: resolve(name, base_dir=base_dir) for name in groups}
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
