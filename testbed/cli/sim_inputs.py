"""What the simulator and training commands share: the services chosen, their profiles, the test
day's traces, the shipped agents and one progress bar (each check one `ConfigError` line)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from testbed.cli import console
from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles import paper

if TYPE_CHECKING:
    from rich.progress import Progress

    from testbed.profiles import ServiceProfile


def chosen_services(service: str) -> list[str]:
    chosen = list(paper.SERVICES) if service == "all" else [s.strip() for s in service.split(",")]
    unknown = [s for s in chosen if s not in paper.SERVICES]
    if unknown:
        raise ConfigError(
            [
                ConfigProblem(
                    "--service",
                    None,
                    "service",
                    f"unknown {', '.join(unknown)}; known: {', '.join(paper.SERVICES)}, all",
                )
            ]
        )
    return chosen


RATE_LIMIT_HELP = (
    "profile: the per-instance rate limits of the profiles (the dissertation's published "
    "simulator's, not in its text; they explain Table 5.2's figures); none: no rate limit."
)


def sim_profiles(rate_limit: str, services: list[str]) -> dict[str, ServiceProfile]:
    from testbed.profiles import default_profiles  # pydantic models: not for `--help`

    if rate_limit not in ("profile", "none"):
        raise ConfigError(
            [ConfigProblem("--rate-limit", None, "rate_limit", f"{rate_limit!r}; use profile or none")]
        )
    if rate_limit == "none":
        return {s: default_profiles()[s].replace(rate_limit=None) for s in services}
    return {s: default_profiles()[s] for s in services}


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
                        "val/ (the paper's traces are in the team's shared folder, ../shared/traces)",
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
                    "train one with `testbed train SERVICE --traces ../shared/traces`",
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
