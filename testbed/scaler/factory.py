"""Builds the scaling policy of every service of a cell by name, with the shared policies (fa2,
gslice, inss, ddpg) as one object over the services that use them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.profiles import ServiceProfile
from testbed.scaler.fa2 import Fa2Policy, Pipeline
from testbed.scaler.gslice import EqualSharePolicy
from testbed.scaler.policies import make_policy
from testbed.scaler.share import SharePolicy, default_model, read_share_meta

SHARED_PLANNERS = ("fa2", "gslice")  # plan MPS shares and batches from the services' profiles
SHARED_ACTORS = ("inss", "ddpg")  # one trained actor over the services it was trained for
SHARE_POLICIES = SHARED_PLANNERS + SHARED_ACTORS  # the policies that set MPS shares and batches


@dataclass(frozen=True)
class PolicyChoice:
    """The policy a service runs and the model file it loads, if any (already resolved)."""

    service: str
    policy: str
    model: Path | None = None


@dataclass
class BuiltPolicies:
    """One policy per service, in the services' order, and the model file each actor kind
    loaded (`{"ddpg": ".../ddpg.zip"}`)."""

    policies: dict[str, Any]
    models: dict[str, str] = field(default_factory=dict)


def build_policies(choices: Sequence[PolicyChoice], profiles: Mapping[str, ServiceProfile], *,
                   total_units: int, seed: int, pipelines: Sequence[Pipeline] = (),
                   profile_source: str = "") -> BuiltPolicies:
    """Every service's policy: fa2 and gslice plan the services that chose them together, inss
    and ddpg load one actor for the services their model was trained for (checked at load), the
    rest are one `make_policy` each."""
    out: dict[str, Any] = {}
    models: dict[str, str] = {}
    for kind in SHARED_PLANNERS:
        mine = {c.service: profiles[c.service] for c in choices if c.policy == kind}
        if not mine:
            continue
        if kind == "fa2":
            shared: Any = Fa2Policy(mine, pipelines=list(pipelines), profile_source=profile_source)
        else:
            shared = EqualSharePolicy(mine, profile_source=profile_source)
        out.update(dict.fromkeys(mine, shared))
    for kind in SHARED_ACTORS:
        users = [c for c in choices if c.policy == kind]
        if not users:
            continue
        path = users[0].model or default_model(kind)
        order = read_share_meta(path).services  # the actor's inputs come in its training order
        actor = SharePolicy.load(path, {name: profiles[name] for name in order},
                                 profile_source=profile_source)
        models[kind] = str(path)
        out.update(dict.fromkeys(order, actor))
    for c in choices:
        if c.service not in out:
            out[c.service] = make_policy(c.policy, c.service, total_units=total_units, seed=seed,
                                         model=str(c.model) if c.model else None)
    return BuiltPolicies({c.service: out[c.service] for c in choices}, models)
