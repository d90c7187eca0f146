"""A joint planner's partners in `testbed sim compare`.

A trained joint planner (inss, ddpg: one actor over several services) plans every service its
model was trained for together, and its observation holds all of them. Compared on some of them
(`sim compare --service imgcls --policies inss`) it runs on all: the others, its partners, are
simulated beside them on the same GPUs, on the traces and at the ratios the table would give them
were they compared, in the model's order, and its row reports the compared services only
(`RunSettings.report`): their figures, share bound included, are those of a comparison of all of
them with the same seed. The other policies of the comparison run the compared services alone.
The partners' inputs are checked before anything runs: each needs a profile, the GPU curve the
planner reads and a trace, else one line naming the file, the field and what to do.

A scenario stays strict (`testbed.scenario.policy_checks`): on a testbed the partners would need
replicas, clients and traffic of their own, so a scenario gives every one of them the policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.config.yamlfile import load_yaml_file
from testbed.errors import ConfigError, ConfigProblem
from testbed.load.trace import Trace
from testbed.profiles import PACKAGED_PROFILES, ServiceProfile
from testbed.scaler.registry import PolicyEntry, resolve
from testbed.scaler.share import read_share_meta


@dataclass(frozen=True)
class JointRun:
    """A joint planner compared on some of the services its model plans: the model, every
    service it plans (in its training order) and the partners run beside the compared ones."""

    policy: str
    model: Path
    planned: tuple[str, ...]
    partners: tuple[str, ...]  # planned but not compared, in the model's order

    def services(self) -> list[str]:
        """The services its run simulates, in the model's order, as in training: the cluster
        places them and applies their targets in this order, which is not neutral (imgcls put
        first held 3.1 units where it holds 2.4 in its place: Table 5.1, 400 steps, seeds 0-3),
        so the compared services' figures are those of a run of all of them with the same seed."""
        return list(self.planned)

    def why(self, compared: Sequence[str]) -> str:
        """Why the partners run, for an error: '(inss runs chatbot, tts beside imgcls: its model
        inss.zip plans chatbot, imgcls, tts together)'."""
        return (f"{self.policy} runs {', '.join(self.partners)} beside {', '.join(compared)}: its "
                f"model {self.model.name} plans {', '.join(self.planned)} together")

    def note(self, compared: Sequence[str], traces: Mapping[str, Trace]) -> str:
        """The one line saying the partners ran and on what, for the terminal and the report."""
        on = ", ".join(f"{p} ({traces[p].name})" if p in traces else p for p in self.partners)
        return (f"{self.policy} ran {on} beside {', '.join(compared)} on the same GPUs at the "
                f"table's ratios (its model {self.model.name} plans {', '.join(self.planned)} "
                f"together); its rows report {', '.join(compared)} only")


def is_joint(entry: PolicyEntry) -> bool:
    """A trained planner over several services (inss, ddpg), whose model names them.

    entry: a registry entry."""
    return entry.needs_model and entry.sets_shares


def joint_runs(names: Sequence[str], models: Path | None,
               services: Sequence[str]) -> dict[str, JointRun]:
    """The joint planners among `names` whose model in `models` (`NAME.zip`) plans more services
    than `services`, every one of them among its own: what each runs beside them. A model that is
    missing or plans a service not among its own is left to building the policy, which refuses it
    in one line (`comparison_policies`).

    names: the compared policies; models: their folder; services: the compared services."""
    out: dict[str, JointRun] = {}
    for name in names:
        entry = resolve(name, source="--policies", field="policies", base_dir=Path.cwd())
        path = models / f"{name}.zip" if models is not None else None
        if not is_joint(entry) or path is None or not path.is_file():
            continue
        planned = read_share_meta(path).services  # one line naming the file if it is no model
        partners = tuple(s for s in planned if s not in services)
        if partners and all(s in planned for s in services):
            out[name] = JointRun(name, path, tuple(planned), partners)
    return out


def partner_services(runs: Iterable[JointRun]) -> list[str]:
    """Every partner of `runs`, once, in the order they come.

    runs: the joint runs of one comparison."""
    out: list[str] = []
    for run in runs:
        out += [p for p in run.partners if p not in out]
    return out


def check_partners(runs: Mapping[str, JointRun], services: Sequence[str],
                   profiles: Mapping[str, ServiceProfile], profiles_path: Path | None,
                   traces: Mapping[str, Trace] | None = None) -> None:
    """Each partner's profile and its GPU curve, and (with `traces`) its trace: one ConfigError
    with a line per missing one, naming the file and field, and what to do.

    runs: the comparison's joint runs; services: the compared ones; profiles: the profiles in use
    (those of `profiles_path` over the registry's); traces: each service's trace, if loaded."""
    problems: list[ConfigProblem] = []
    doc = load_yaml_file(profiles_path) if profiles_path is not None else None
    source = str(profiles_path) if profiles_path else PACKAGED_PROFILES
    instead = f"or compare {', '.join(services)} with policies that need no model"
    seen: set[str] = set()  # a partner of two planners: one line
    for run in runs.values():
        why = run.why(services)
        for p in (p for p in run.partners if p not in seen):
            seen.add(p)
            if p not in profiles:
                problems.append(ConfigProblem(str(run.model), None, "services", (
                    f"{why}, and {p} has no profile here: give --profiles FILE with {p}'s "
                    f"(the one it was trained with), {instead}")))
            elif profiles[p].gpu is None:
                problems.append(ConfigProblem(
                    source, doc.line_of(("services", p, "gpu")) if doc else None,
                    f"services.{p}.gpu", f"{why}, and {p}'s profile has no gpu curve: give {p} a "
                    f"gpu: block, {instead}"))
            elif traces is not None and p not in traces:
                problems.append(ConfigProblem("--trace", None, "trace", (
                    f"{why}, and {p} has no trace: pass --trace {p}=FILE, {instead}")))
    if problems:
        raise ConfigError(problems)
