"""What the simulator and training commands share: the services chosen, their profiles, their
traces (the test day's, or the user's own files), the shipped agents and one progress bar (each
check one `ConfigError` line)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from testbed.cli import checks, console, err_console, show_traces
from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles import paper

if TYPE_CHECKING:
    from rich.progress import Progress

    from testbed.cluster.base import ServiceTarget
    from testbed.load.trace import Trace
    from testbed.profiles import ServiceProfile

# one option, one meaning for every command that runs services on traces
TraceOpt = typer.Option(
    None, "--trace",
    help="A trace file of your own ('DURATION COUNT' lines or CSV, docs/traces.md), in place of "
    "the test day: FILE for every service of the command, or SERVICE=FILE for one (repeatable).")
TraceTimeUnitOpt = typer.Option(
    None, "--trace-time-unit",
    help="The time (or interval) unit of --trace CSV files whose header states none: ms, s, min, h.")
TraceRateUnitOpt = typer.Option(
    None, "--trace-rate-unit",
    help="The rate unit of --trace CSV files whose header states none: per_s, per_min, per_h.")
ProfilesOpt = typer.Option(
    None, "--profiles",
    help="Profile file merged over the registry's (services.yaml's format): it may change a "
    "service's fields or add services of your own.")


def known_profiles(path: Path | None) -> dict[str, ServiceProfile]:
    """Every registered service's profile, with `path`'s (a user's profile file) merged over them."""
    from testbed.profiles import load_profiles  # pydantic models: not for `--help`

    return load_profiles(path)


def chosen_services(service: str | Sequence[str],
                    known: Mapping[str, ServiceProfile] | None = None) -> list[str]:
    """The services a `--service` names: comma-separated or repeated names, each a registered
    service or one of `known` (the profiles in use); `all` is the paper's three, not every
    registered service. An unknown name is one line listing the known ones."""
    if known is None:
        known = known_profiles(None)
    texts = [service] if isinstance(service, str) else list(service)
    names = [s.strip() for text in texts for s in text.split(",") if s.strip()]
    chosen: list[str] = []
    for name in names:
        for s in paper.SERVICES if name == "all" else (name,):
            if s not in chosen:
                chosen.append(s)
    unknown = [s for s in chosen if s not in known]
    if unknown or not chosen:
        raise ConfigError([ConfigProblem(
            "--service", None, "service",
            f"unknown {', '.join(unknown) or '(none)'}; known: {', '.join(known)} "
            f"(all: the paper's three, {', '.join(paper.SERVICES)}; --profiles FILE adds services)")])
    return chosen


def note_left_out(known: Mapping[str, ServiceProfile], services: Sequence[str],
                  path: Path | None) -> None:
    """Say which services a profile file adds that the command does not run (on stderr: --json
    output stays clean), rather than leaving them out silently."""
    if path is None:
        return
    registered = known_profiles(None)
    left = [s for s in known if s not in registered and s not in services]
    if left:
        err_console.print(
            f"note: {', '.join(left)} from {path} not run here (services: {', '.join(services)}); "
            f"--service {','.join([*services, *left])} adds {'them' if len(left) > 1 else 'it'}",
            highlight=False, markup=False)


def default_ratio(service: str) -> float:
    """The request ratio of a service's trace counts (`testbed.train.evaluate.default_ratio`)."""
    from testbed.train.evaluate import default_ratio as ratio  # numpy: not for `--help`

    return ratio(service)


@dataclass(frozen=True)
class ChosenTraces:
    """Each service's trace, and the services that run on a file of the user's (`--trace`)."""

    traces: dict[str, Trace]
    own: dict[str, str]  # service -> its trace's file name, where not the paper's test day

    @property
    def paper(self) -> bool:
        """Every service on the paper's test day: the paper's figures are comparable."""
        return not self.own

    def label(self) -> str:
        """The traces for a title: 'the test day', or the file names of the user's traces."""
        names = sorted(set(self.own.values()))
        if not names:
            return "the test day"
        return ", ".join(names) + ("" if len(self.own) == len(self.traces) else " and the test day")

    def of(self, services: Sequence[str]) -> ChosenTraces:
        """These traces for `services` only (the compared ones, without a planner's partners)."""
        return ChosenTraces({s: self.traces[s] for s in services},
                            {s: f for s, f in self.own.items() if s in services})


def trace_choice(texts: Sequence[str] | None, services: Sequence[str]
                 ) -> tuple[Path | None, dict[str, Path]]:
    """`--trace` values: a bare FILE (for every service), SERVICE=FILE (for one). A missing file,
    a service the command does not run, or two files for one service is one line."""
    every: Path | None = None
    each: dict[str, Path] = {}
    for text in texts or ():
        name, sep, rest = text.partition("=")
        if sep and "/" not in name and not Path(text).exists():
            if name not in services:
                raise ConfigError([ConfigProblem(
                    "--trace", None, "trace", f"{text!r} names {name!r}, which this command does "
                    f"not run (its services: {', '.join(services)})")])
            if name in each:
                raise ConfigError([ConfigProblem("--trace", None, "trace",
                                                 f"two trace files for {name}")])
            each[name] = Path(rest)
        elif every is not None:
            raise ConfigError([ConfigProblem(
                "--trace", None, "trace", f"two trace files for every service ({every}, {text}): "
                "give SERVICE=FILE for each")])
        else:
            every = Path(text)
    for path in [*([every] if every else []), *each.values()]:
        if not path.is_file():
            raise ConfigError([ConfigProblem(str(path), None, "", "no such trace file")])
    return every, each


def chosen_traces(texts: Sequence[str] | None, traces_dir: Path | None, services: Sequence[str],
                  time_unit: str | None = None, rate_unit: str | None = None,
                  why: Mapping[str, str] | None = None) -> ChosenTraces:
    """Each service's trace: its `--trace SERVICE=FILE`, else the bare `--trace FILE`, else its
    test day in `traces_dir` (the paper's three only; None: the traces shipped with testbed);
    time_unit, rate_unit: CSV files' units where their header states none; why: why a service
    runs that `--service` did not name (a joint planner's partner), for the error without a trace."""
    from testbed.load.trace import load_trace  # numpy: not for `--help`

    checks.trace_units(time_unit, rate_unit)
    every, each = trace_choice(texts, services)
    files = {s: each.get(s, every) for s in services}
    own = {s: f.name for s, f in files.items() if f is not None}
    need_day = [s for s in services if s not in own]
    no_day = [s for s in need_day if s not in paper.TEST_SHIFT_HOURS]
    if no_day:
        reasons = "".join(f" ({why[s]})" for s in no_day if s in (why or {}))
        raise ConfigError([ConfigProblem(
            "--trace", None, "trace", f"no trace for {', '.join(no_day)}{reasons}: the test day has "
            f"the paper's services only; pass --trace {no_day[0]}=FILE (or --trace FILE for all)")])
    loaded = {f: load_trace(f, time_unit=time_unit, rate_unit=rate_unit)
              for f in set(files.values()) if f is not None}
    show_traces(loaded[f] for f in sorted(loaded))
    from testbed.traces import traces_folder

    day = test_traces(traces_folder(traces_dir), need_day) if need_day else {}
    return ChosenTraces({s: loaded[files[s]] if s in own else day[s] for s in services}, own)


RATE_LIMIT_HELP = (
    "profile: the per-instance rate limits of the profiles (the dissertation's published "
    "simulator's, not in its text; they explain Table 5.2's figures); none: no rate limit."
)


MeasureOpt = typer.Option(
    "harness", "--measure",
    help="How each period is read: harness (the simulator's own reading, as Tables 5.1-5.3 are "
    "made) or drafas (as the DRAFAS testbed's Prometheus read its sidecars and pods: "
    "docs/table-5.4.md, 'Candidate effects'); the names are testbed.sim.measure.MEASURES.")


def sim_options(measure: str) -> Any:
    """The simulator's options read the way `--measure` names (one line for an unknown name)."""
    from testbed.sim.cluster import DEFAULT_OPTIONS, with_measure  # numpy: not for `--help`
    from testbed.sim.measure import MEASURES

    if measure not in MEASURES:
        raise ConfigError([ConfigProblem("--measure", None, "measure",
                                         f"unknown way of measuring {measure!r}; known: "
                                         f"{', '.join(MEASURES)}")])
    return with_measure(DEFAULT_OPTIONS, measure)


def sim_profiles(rate_limit: str, services: list[str],
                 known: Mapping[str, ServiceProfile] | None = None) -> dict[str, ServiceProfile]:
    """The chosen services' profiles from `known` (the profiles in use; default the registry's)."""
    if rate_limit not in ("profile", "none"):
        raise ConfigError(
            [ConfigProblem("--rate-limit", None, "rate_limit", f"{rate_limit!r}; use profile or none")]
        )
    if known is None:
        known = known_profiles(None)
    if rate_limit == "none":
        return {s: known[s].replace(rate_limit=None) for s in services}
    return {s: known[s] for s in services}


def test_traces(traces: Path, services: list[str]):
    """The test day for `services`, or one line naming the missing file and where traces are."""
    from testbed.train.evaluate import test_day_traces  # numpy and the simulator: not for `--help`

    for s in services:
        path = traces / paper.test_day_file(s)
        if not path.is_file():
            raise ConfigError(
                [
                    ConfigProblem(
                        str(path),
                        None,
                        "",
                        "no such trace file: pass --traces DIR, a folder with test/, train/ and "
                        "val/ (without --traces: the paper's, shipped with testbed)",
                    )
                ]
            )
    return test_day_traces(traces, services)


def drl_policies(models: Path, services: list[str]) -> dict:
    """One loaded agent per service from `models` (a directory of SERVICE.zip or, for one service,
    a file); a missing or mismatched model is one ConfigError line naming it."""
    from testbed.scaler.ppo import MaskablePpoPolicy  # numpy (sb3 on load): only where an agent is loaded

    if not models.exists() and models.suffix != ".zip":
        raise ConfigError(
            [
                ConfigProblem(
                    str(models),
                    None,
                    "",
                    "no such model directory: the agents ship in the repository's models/; "
                    "train one with `testbed train SERVICE`",
                )
            ]
        )
    return {s: MaskablePpoPolicy.load(model_for(str(models), s), s) for s in services}


def progress_bar() -> Progress:
    # rich's progress bar (and its live display): only for the commands that show one
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def model_for(model: str | None, service: str) -> str | None:
    if model and Path(model).is_dir():
        return str(Path(model) / f"{service}.zip")
    return model


def layout_targets(layout: Path, services: list[str]) -> tuple[dict[str, ServiceTarget], int]:
    """The layout file's starting target per service (each one compared), and its GPU count."""
    from testbed.cluster.base import ServiceTarget  # the cluster types: not for `--help`
    from testbed.config.gpu_layout import load_layout  # pydantic models: not for `--help`

    spec_layout = load_layout(layout)
    unknown = [s for s in spec_layout.services if s not in services]
    if unknown:
        raise ConfigError([ConfigProblem(
            str(layout), None, "services", f"{', '.join(unknown)} not compared here (compared: "
            f"{', '.join(services)}; --service adds services)")])
    initial = {
        s: ServiceTarget(v.replicas, v.share_pct, v.batch, tuple(v.gpus) if v.gpus is not None else None)
        for s, v in spec_layout.services.items()
    }
    return initial, spec_layout.gpus


def parse_pipeline(text: str, pipeline_type: Any, known: list[str]) -> Any:
    """`--pipeline SERVICE,SERVICE:SLA_MS` as `pipeline_type(services, sla_ms)`, each service one
    of `known` and named once."""
    chain, _, sla = text.partition(":")
    services = tuple(s.strip() for s in chain.split(",") if s.strip())
    try:
        sla_ms = float(sla)
    except ValueError:
        sla_ms = -1.0
    if not services or sla_ms <= 0:
        raise ConfigError([ConfigProblem("--pipeline", None, "pipeline",
                                         f"expected SERVICE,SERVICE:SLA_MS, got {text!r}")])
    unknown = [s for s in services if s not in known]
    if unknown:
        raise ConfigError([ConfigProblem("--pipeline", None, "pipeline",
                                         f"unknown service {', '.join(map(repr, unknown))} in "
                                         f"{text!r}; compared: {', '.join(known)}")])
    if len(set(services)) < len(services):
        raise ConfigError([ConfigProblem("--pipeline", None, "pipeline",
                                         f"a service appears twice in {text!r}")])
    return pipeline_type(services, sla_ms)
