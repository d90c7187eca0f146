"""The policy registry: every scaling policy the harness knows, by name, and how each is built.

The built-in policies (rule v1/v2, static, HPA-like, random, Maskable PPO; FA2, GSLICE-like,
InSS and DDPG, which set MPS shares and batch sizes) are this registry's entries. A user's policy
reaches it the same way from a reference (`module:Class`, wherever a policy name is accepted),
from an installed package (the `testbed.policies` entry-point group: name -> class) or from Python
(`register_policy`). A user's class is built with the keyword arguments `service` and
`total_units` where its `__init__` takes them, else with none, and with a scenario's
`policy_args:` (`BuildArgs.options`); it needs `act(observation, action_mask) -> action index` and
may define `observe(window)` (see `testbed.scaler.loop`). The rules take their thresholds
(`RuleThresholds`' fields) as options too; the other built-in policies take none.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from testbed import plugins
from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles import PACKAGED_PROFILES, RuleThresholds, ServiceProfile, default_profiles
from testbed.profiles.registry import profile_for
from testbed.scaler.fa2 import Fa2Policy, Pipeline
from testbed.scaler.gslice import EqualSharePolicy
from testbed.scaler.policies import HpaPolicy, Policy, RandomPolicy, RuleV1, RuleV2, StaticPolicy
from testbed.scaler.ppo import MaskablePpoPolicy
from testbed.scaler.share import SharePolicy, default_model, read_share_meta

ENTRY_POINT_GROUP = "testbed.policies"


@dataclass(frozen=True)
class BuildArgs:
    """What a policy may be built from: the cell's resource units and seed, the model file it
    loads (if any), the profiles in use (None: the service registry's), and for the policies that
    plan shares, the pipelines and where the profiles came from (for their errors)."""

    total_units: int
    seed: int = 0
    model: Path | None = None
    profiles: Mapping[str, ServiceProfile] | None = None
    pipelines: Sequence[Pipeline] = ()
    profile_source: str = PACKAGED_PROFILES
    options: Mapping[str, Any] = field(default_factory=dict)  # a scenario's `policy_args:`

    def profile(self, service: str) -> ServiceProfile:
        """The profile of `service` in these arguments' profiles (the registry's without them)."""
        return profile_for(dict(self.profiles) if self.profiles is not None else default_profiles(),
                           service)


@dataclass(frozen=True)
class PolicyEntry:
    """One registered policy. `build(service, args)` makes one policy per service; `plan(services,
    args)` makes one object over every service that chose it (a policy that sets MPS shares and
    batch sizes: `plan(view)`, not `act`) and returns it per service."""

    name: str
    origin: str  # where it came from: "built in", a reference, an entry point, register_policy()
    build: Callable[[str, BuildArgs], Any] | None = None
    plan: Callable[[list[str], BuildArgs], dict[str, Any]] | None = None
    needs_model: bool = False  # loads a trained model (default: models/SERVICE.zip or NAME.zip)
    compared: bool = True  # in `testbed sim compare --policies all` (the paper's comparison)
    default_model: Path | None = None  # a planner's model file when none is given
    description: str = field(default="", compare=False)
    accepts: tuple[str, ...] | None = ()  # the `policy_args:` it takes (None: any keyword)

    def options_problem(self, options: Mapping[str, Any]) -> str | None:
        """Why `options` (a scenario's `policy_args:`) do not fit this policy, None if they do
        (their values are checked when it is built)."""
        unknown = sorted(set(options) - set(self.accepts)) if self.accepts is not None else []
        if not unknown:
            return None
        takes = ", ".join(self.accepts or ()) or "none"
        return f"{self.name} takes no argument {', '.join(map(repr, unknown))} (it takes: {takes})"

    @property
    def sets_shares(self) -> bool:
        """Plans MPS shares and batch sizes for its services together (runs on the GPU model)."""
        return self.plan is not None


def _problem(field_: str, message: str) -> ConfigError:
    return ConfigError([ConfigProblem("<policy>", None, field_, message)])


def _rule(cls: type) -> Callable[[str, BuildArgs], Any]:
    """A rule built from the service's profile, its `rule:` thresholds changed by the options."""
    def build(service: str, args: BuildArgs) -> Any:
        profile = args.profile(service)
        if args.options:
            try:
                rule = RuleThresholds.model_validate({**profile.rule.model_dump(), **args.options})
            except ValidationError as exc:
                first = exc.errors()[0]
                raise _problem(f"policy_args.{first['loc'][0]}", first["msg"]) from None
            profile = profile.replace(rule=rule)
        return cls.for_profile(profile)
    return build


def _ppo(service: str, args: BuildArgs) -> Policy:
    if not args.model:
        raise _problem("model", "the ppo policy needs --model FILE")
    return MaskablePpoPolicy.load(str(args.model), service)


FA2_OPTIONS = ("share_pct", "headroom", "max_batch")  # Fa2Policy's own knobs, as `policy_args:`
RULE_OPTIONS = tuple(RuleThresholds.model_fields)


def _fa2(services: list[str], args: BuildArgs) -> dict[str, Any]:
    pol = Fa2Policy({s: args.profile(s) for s in services}, pipelines=list(args.pipelines),
                    profile_source=args.profile_source, **args.options)
    return dict.fromkeys(services, pol)


def _gslice(services: list[str], args: BuildArgs) -> dict[str, Any]:
    pol = EqualSharePolicy({s: args.profile(s) for s in services}, profile_source=args.profile_source)
    return dict.fromkeys(services, pol)


def _actor(kind: str) -> Callable[[list[str], BuildArgs], dict[str, Any]]:
    def plan(services: list[str], args: BuildArgs) -> dict[str, Any]:
        """One trained actor over every service its model was trained for, in its training order
        (checked at load against the services that chose it where a scenario names them)."""
        path = args.model or default_model(kind)  # a model of `kind` (checked by read_share_meta)
        order = read_share_meta(path).services
        if sorted(services) != sorted(order):
            raise ConfigError([ConfigProblem(
                str(path), None, "services",
                f"this {kind} model was trained to plan {', '.join(order)} together, so it runs "
                f"on exactly those; asked for {', '.join(services)}: train one for them with "
                f"`testbed train --policy {kind}`, or compare {', '.join(services)} with policies "
                "that need no model")])
        actor = SharePolicy.load(path, {name: args.profile(name) for name in order},
                                 profile_source=args.profile_source)
        return dict.fromkeys(order, actor)
    return plan


_BUILTIN: dict[str, PolicyEntry] = {e.name: e for e in (
    PolicyEntry("rule_v1", "built in", build=_rule(RuleV1), accepts=RULE_OPTIONS,
                description="Algorithm 2: utilization against four thresholds (profile `rule:`)"),
    PolicyEntry("rule_v2", "built in", build=_rule(RuleV2), accepts=RULE_OPTIONS,
                description="Algorithm 4: SLO violation or utilization (profile `rule:`)"),
    PolicyEntry("static", "built in", build=lambda s, a: StaticPolicy(),
                description="never scales"),
    PolicyEntry("hpa", "built in", build=lambda s, a: HpaPolicy(total_units=a.total_units),
                description="Kubernetes-HPA-like, 60 % target"),
    PolicyEntry("random", "built in", build=lambda s, a: RandomPolicy(a.seed), compared=False,
                description="uniform over the valid actions"),
    PolicyEntry("ppo", "built in", build=_ppo, needs_model=True,
                description="Maskable PPO agent (models/SERVICE.zip)"),
    PolicyEntry("fa2", "built in", plan=_fa2, accepts=FA2_OPTIONS,
                description="FA2: shares and batches per SLO"),
    PolicyEntry("gslice", "built in", plan=_gslice, description="GSLICE-like equal split"),
    PolicyEntry("inss", "built in", plan=_actor("inss"), needs_model=True,
                default_model=default_model("inss"),
                description="InSS actor (models/inss.zip)"),
    PolicyEntry("ddpg", "built in", plan=_actor("ddpg"), needs_model=True,
                default_model=default_model("ddpg"),
                description="DDPG-MPS actor (models/ddpg.zip)"),
)}
_registered: dict[str, PolicyEntry] = {}


def _class_entry(name: str, cls: Any, origin: str) -> PolicyEntry:
    """The entry of a user's policy class: `cls(service=..., total_units=...)` with the keywords
    its `__init__` accepts."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # a class without an inspectable signature: no arguments
        params = {}
    anything = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    takes = [k for k in ("service", "total_units") if anything or k in params]
    own = tuple(k for k, p in params.items() if k not in ("service", "total_units")
                and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD))

    def build(service: str, args: BuildArgs) -> Any:
        given = {"service": service, "total_units": args.total_units}
        kwargs = {k: given[k] for k in takes} | dict(args.options)
        try:
            policy = cls(**kwargs)
        except Exception as exc:  # the user's constructor: its failure is theirs to read, in one line
            shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
            detail = f"{type(exc).__name__}: {exc}".splitlines()[0]
            raise _problem("policy", f"{name}({shown}) failed ({detail})") from None
        if not isinstance(getattr(policy, "name", None), str):
            with contextlib.suppress(AttributeError):
                policy.name = name
        with contextlib.suppress(AttributeError):  # results and decisions call it as it was named
            policy.testbed_label = name  # (`policy_name`), whatever its own `name` says
        return policy

    return PolicyEntry(name, origin, build=build, compared=False, accepts=None if anything else own,
                       description=(inspect.getdoc(cls) or "").split("\n")[0])


def _check_class(obj: Any, what: str, source: str, line: int | None, field_: str) -> None:
    """A policy class: a class with a callable `act` (one line naming where it was named if not)."""
    def fail(message: str) -> ConfigError:
        return ConfigError([ConfigProblem(source, line, field_, message)])

    if not inspect.isclass(obj):
        raise fail(f"{what} is a {type(obj).__name__}, not a class: a policy is a class with "
                   "act(observation, action_mask) -> action index")
    if not callable(getattr(obj, "act", None)):
        raise fail(f"{what} has no act(observation, action_mask) method: a policy needs one "
                   "(returning an action index 0..4)")


def register_policy(name: str, cls: type, *, replace: bool = False) -> None:
    """Add a policy class to the registry of this process, under `name`.

    Args:
        name: the name scenarios and `--policy` use.
        cls: a class with `act(observation, action_mask) -> int` (and optionally `observe(window)`);
            built with `service=` and `total_units=` where its `__init__` takes them.
        replace: allow a name already registered (never a built-in one).

    Raises:
        ConfigError: `cls` is no policy class, or the name is taken.
    """
    where = "register_policy()"
    _check_class(cls, f"{getattr(cls, '__name__', cls)!r}", where, None, name)
    taken = name in _BUILTIN or name in _installed() or (name in _registered and not replace)
    if taken or plugins.is_ref(name):
        origin = _lookup(name).origin if _lookup(name) else "a reference"
        raise ConfigError([ConfigProblem(where, None, name,
                                         f"a policy named {name!r} is already defined ({origin})")])
    _registered[name] = _class_entry(name, cls, where)


def unregister_policy(name: str) -> None:
    """Remove a policy added with `register_policy` (built-in and installed ones stay).

    name: the name it was registered under."""
    _registered.pop(name, None)


@functools.cache
def _installed() -> dict[str, PolicyEntry]:
    """The policies of installed packages (entry-point group `testbed.policies`), loaded once."""
    out: dict[str, PolicyEntry] = {}
    for name, obj in plugins.entry_points(ENTRY_POINT_GROUP):
        where = f"entry point {ENTRY_POINT_GROUP}:{name}"
        _check_class(obj, repr(name), where, None, "")
        if name in _BUILTIN or name in out:
            raise ConfigError([ConfigProblem(where, None, "",
                                             f"a policy named {name!r} is already defined")])
        out[name] = _class_entry(name, obj, where)
    return out


def _lookup(name: str) -> PolicyEntry | None:
    return _BUILTIN.get(name) or _registered.get(name) or _installed().get(name)


def entries() -> dict[str, PolicyEntry]:
    """The registry: every registered policy by name (built in, installed, registered)."""
    return {**_BUILTIN, **_installed(), **_registered}


def policy_names() -> list[str]:
    """The registered names (what `--policy` and `policy:` accept besides module:Class)."""
    return list(entries())


def known(text: str) -> bool:
    """A registered name or the form of a reference (imported where it is used).

    text: a policy name or `module:Class`."""
    return plugins.is_ref(text) or _lookup(text) is not None


def unknown_message(text: str) -> str:
    """The error line for an unknown policy `text`: the known names, and the `module:Class` form."""
    return (f"unknown policy {text!r}; known: {', '.join(policy_names())}, "
            "or module:Class (a class of your own)")


def resolve(name: str, *, source: str = "<policy>", line: int | None = None, field: str = "policy",
            base_dir: str | Path | None = None) -> PolicyEntry:
    """The entry `name` denotes: a registered name, or a `module:Class` reference imported from
    `base_dir` (the naming file's folder) or PYTHONPATH.

    Raises:
        ConfigError: one line naming source, line and field: an unknown name, a module that fails
            to import, a missing attribute, or an object with no `act`.
    """
    entry = _lookup(name)
    if entry is not None:
        return entry
    if not plugins.is_ref(name):
        raise ConfigError([ConfigProblem(source, line, field, unknown_message(name))])
    cls = plugins.load_ref(name, source=source, line=line, field=field, base_dir=base_dir)
    _check_class(cls, repr(name), source, line, field)
    return _class_entry(name, cls, name)
