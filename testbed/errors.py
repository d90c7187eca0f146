"""The harness's error types: each carries the message a user sees, nothing more."""

from __future__ import annotations

from dataclasses import dataclass


class TestbedError(Exception):
    """A failure the user can act on; the CLI prints it as one line and exits non-zero."""

    __test__ = False  # not a pytest test class despite the name
    exit_code = 1


@dataclass(frozen=True)
class ConfigProblem:
    """One problem in a config file: where it is and what is wrong."""

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class ConfigError(TestbedError):
    """A config file failed to load or validate; names file, line and field of every problem."""

    exit_code = 2

    def __init__(self, problems: list[ConfigProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class MissingRequirement(TestbedError):
    """Something the host lacks (root, a binary, a kernel feature), with how to get it."""

    exit_code = 3


class StateError(TestbedError):
    """The recorded state disagrees with the request (already up, not up, ...)."""

    exit_code = 4


class MachineBehind(TestbedError):
    """A time-scaled run whose clients fell behind their schedule again when run once more: the
    machine, not the harness, set its figures, so none are kept."""
