"""Runs one playbook through ansible-runner, shows its events as rich progress, keeps them in the run dir.

Every event ansible-runner emits is appended to `<run_dir>/ansible/events.jsonl` (runner also keeps
its own artifacts under `<run_dir>/ansible/artifacts/`); the first failed or unreachable host
stops the run (the playbooks set any_errors_fatal) and becomes a `PlaybookFailed` naming the host,
the task and the log.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from testbed.errors import MissingRequirement, StateError
from testbed.paths import PLAYBOOKS_DIR

_MESSAGE_KEYS = ("msg", "stderr", "reason", "module_stderr", "stdout")


@dataclass(frozen=True)
class TaskFailure:
    """The task that stopped a run, on which host, and why (secrets are never in it: no_log tasks)."""

    host: str
    task: str
    play: str
    message: str
    unreachable: bool = False

    def __str__(self) -> str:
        what = "unreachable" if self.unreachable else "failed"
        return f"host {self.host} {what} at task {self.task!r} (play {self.play!r}): {self.message}"


class PlaybookFailed(StateError):
    """A playbook stopped; carries the failure and where its log is."""

    def __init__(self, playbook: str, failure: TaskFailure | None, log: Path, rc: int):
        self.failure = failure
        self.log = log
        why = str(failure) if failure else f"ansible exited with {rc}"
        super().__init__(f"{playbook}: {why}\nlog: {log}")


@dataclass
class PlaybookResult:
    playbook: str
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    rc: int
    events_file: Path
    changed: dict[str, int] = field(default_factory=dict)  # host -> tasks that changed something
    tasks_ok: int = 0
    failure: TaskFailure | None = None

    @property
    def total_changed(self) -> int:
        return sum(self.changed.values())


def failure_message(result: Mapping[str, Any]) -> str:
    """One line from a module result: its msg plus the first of stderr/reason/stdout, trimmed."""
    parts = []
    for key in _MESSAGE_KEYS:
        value = result.get(key)
        if value and (key == "msg" or len(parts) < 2):
            text = value if isinstance(value, str) else json.dumps(value)
            parts.append(" ".join(text.split()))
        if len(parts) == 2:
            break
    if not parts:
        if result.get("censored"):
            return "output hidden by no_log (it may hold secrets); rerun the task by hand to see it"
        return "no message"
    text = ": ".join(parts)
    return text if len(text) <= 400 else text[:397] + "..."


class EventRecorder:
    """Subscribes to ansible-runner events: writes each to a JSONL file, tracks tasks and failures."""

    def __init__(self, events_file: Path, on_task: Callable[[str, str], None] | None = None):
        self.events_file = events_file
        self._fh = events_file.open("a", encoding="utf-8")
        self._on_task = on_task
        self.failure: TaskFailure | None = None
        self.changed: dict[str, int] = {}
        self.tasks_ok = 0
        self.tasks_started = 0

    def __call__(self, event: Mapping[str, Any]) -> bool:
        self._fh.write(json.dumps(event, default=str) + "\n")
        self._fh.flush()
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_task_start":
            self.tasks_started += 1
            if self._on_task:
                self._on_task(data.get("play", ""), data.get("task", ""))
        elif kind == "runner_on_ok":
            self.tasks_ok += 1
            if (data.get("res") or {}).get("changed"):
                host = data.get("host", "?")
                self.changed[host] = self.changed.get(host, 0) + 1
        elif (kind in ("runner_on_failed", "runner_on_unreachable") and self.failure is None
              and not data.get("ignore_errors")):
            self.failure = TaskFailure(
                host=data.get("host", "?"), task=data.get("task", "?"),
                play=data.get("play", "?"), message=failure_message(data.get("res") or {}),
                unreachable=kind == "runner_on_unreachable")
        return True  # keep runner's own artifacts too

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()


def ansible_run() -> Callable[..., Any]:
    """ansible_runner.run, or one line saying how to install it."""
    try:
        import ansible_runner
    except ImportError:
        raise MissingRequirement("the lab profile needs ansible-runner and ansible-core: "
                                 "pip install 'testbed[lab]'") from None
    return ansible_runner.run


def run_playbook(playbook: str, *, inventory: Path, run_dir: Path, extravars: Mapping[str, Any],
                 check: bool = False, limit: str | None = None, playbooks_dir: Path = PLAYBOOKS_DIR,
                 console: Console | None = None, runner_run: Callable[..., Any] | None = None
                 ) -> PlaybookResult:
    """Run `playbooks_dir/playbook` against `inventory`; raise PlaybookFailed when it stops."""
    runner_run = runner_run or ansible_run()
    if not (playbooks_dir / playbook).is_file():
        raise MissingRequirement(f"playbook not found: {playbooks_dir / playbook}")
    inventory = Path(inventory).resolve()
    if not inventory.is_file():
        raise MissingRequirement(f"inventory not found: {inventory}")
    work = Path(run_dir) / "ansible"
    work.mkdir(parents=True, exist_ok=True)
    events_file = work / f"{Path(playbook).stem}{'-check' if check else ''}.events.jsonl"
    console = console or Console(stderr=True, emoji=False)

    cmdline = ["--check", "--diff"] if check else []
    with Progress(SpinnerColumn(), TextColumn("[bold]{task.fields[play]}[/]"), BarColumn(),
                  TextColumn("{task.fields[current]}"), TimeElapsedColumn(), console=console,
                  transient=False) as progress:
        bar = progress.add_task(playbook, total=None, play="starting", current="")

        def on_task(play: str, task: str) -> None:
            progress.update(bar, advance=1, play=play[:50], current=task[:70])

        recorder = EventRecorder(events_file, on_task)
        try:
            result = runner_run(
                private_data_dir=str(work), project_dir=str(playbooks_dir), playbook=playbook,
                inventory=str(inventory), extravars=dict(extravars), cmdline=" ".join(cmdline) or None,
                limit=limit, event_handler=recorder, quiet=True,
                envvars={"ANSIBLE_CONFIG": str(playbooks_dir / "ansible.cfg"),
                         "ANSIBLE_ROLES_PATH": str(playbooks_dir / "roles")},
            )
        finally:
            recorder.close()
        if recorder.failure is None:
            progress.update(bar, play="done", current=f"{recorder.tasks_started} tasks")
        else:
            f = recorder.failure
            progress.update(bar, play=f"[red]stopped on {f.host}[/]", current=f.task[:70])

    out = PlaybookResult(playbook, getattr(result, "status", "unknown"), int(result.rc or 0),
                         events_file, recorder.changed, recorder.tasks_ok, recorder.failure)
    if out.status != "successful" or out.rc != 0 or recorder.failure is not None:
        raise PlaybookFailed(playbook, recorder.failure, events_file, out.rc)
    return out
