"""Commands on lab hosts the way the playbooks reach them: Ansible (ansible-runner) ad-hoc modules.

`AnsibleHosts` runs `ansible.builtin.command` with an argument list (never a shell string),
`ansible.builtin.copy` and `ansible.builtin.fetch` against one inventory host, through the same
inventory, SSH settings and `ansible.cfg` as `testbed up --profile lab`. Every runner event is
appended to `<run_dir>/ansible/hosts.events.jsonl`. An unreachable host or a failing command
becomes a `HostFailed` whose message names the host and what failed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from testbed.errors import StateError
from testbed.lab.runner import PLAYBOOKS_DIR, ansible_run, failure_message


class HostFailed(StateError):
    def __init__(self, host: str, what: str, why: str, unreachable: bool = False):
        self.host, self.what, self.unreachable = host, what, unreachable
        super().__init__(f"{host}: {what}: {'unreachable: ' if unreachable else ''}{why}")


@dataclass(frozen=True)
class CommandResult:
    rc: int
    stdout: str
    stderr: str = ""


class HostRunner(Protocol):
    """What the lab's traffic backend does on a host."""

    def run(self, host: str, argv: Sequence[str], *, what: str, check: bool = True
            ) -> CommandResult: ...

    def copy(self, host: str, src: Path, dest: str, *, what: str) -> None: ...

    def fetch(self, host: str, src: str, dest: Path, *, what: str) -> None: ...


class AnsibleHosts:
    """`HostRunner` through ansible-runner's ad-hoc mode (one module call per method call)."""

    def __init__(self, inventory: Path, run_dir: Path, *, become: bool = True,
                 runner_run: Callable[..., Any] | None = None,
                 playbooks_dir: Path = PLAYBOOKS_DIR):
        self._run = runner_run or ansible_run()
        self.inventory = Path(inventory).resolve()
        self.work = Path(run_dir) / "ansible"
        self.work.mkdir(parents=True, exist_ok=True)
        self.events_file = self.work / "hosts.events.jsonl"
        self.become = become
        self.playbooks_dir = playbooks_dir

    def run(self, host: str, argv: Sequence[str], *, what: str, check: bool = True
            ) -> CommandResult:
        res = self._module(host, "ansible.builtin.command",
                           {"argv": [str(a) for a in argv], "expand_argument_vars": False},
                           what, check)
        return CommandResult(int(res.get("rc", 0) or 0), res.get("stdout", ""),
                             res.get("stderr", ""))

    def copy(self, host: str, src: Path, dest: str, *, what: str) -> None:
        self._module(host, "ansible.builtin.copy", {"src": str(Path(src).resolve()),
                                                    "dest": dest, "mode": "0644"}, what, True)

    def fetch(self, host: str, src: str, dest: Path, *, what: str) -> None:
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        self._module(host, "ansible.builtin.fetch", {"src": src, "dest": str(Path(dest).resolve()),
                                                     "flat": True, "fail_on_missing": True},
                     what, True)

    def _module(self, host: str, module: str, args: dict[str, Any], what: str,
                check: bool) -> dict[str, Any]:
        outcome: dict[str, Any] = {}
        with self.events_file.open("a", encoding="utf-8") as fh:
            def on_event(event: dict[str, Any]) -> bool:
                fh.write(json.dumps(event, default=str) + "\n")
                kind = event.get("event", "")
                data = event.get("event_data") or {}
                if kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable") \
                        and data.get("host") == host:
                    outcome["kind"], outcome["res"] = kind, data.get("res") or {}
                return True

            result = self._run(
                private_data_dir=str(self.work), host_pattern=host, inventory=str(self.inventory),
                module=module, module_args=json.dumps(args), quiet=True, event_handler=on_event,
                cmdline="--become" if self.become else None,
                envvars={"ANSIBLE_CONFIG": str(self.playbooks_dir / "ansible.cfg")})
        kind, res = outcome.get("kind"), outcome.get("res") or {}
        if kind == "runner_on_unreachable":
            raise HostFailed(host, what, failure_message(res), unreachable=True)
        if kind is None:
            raise HostFailed(host, what, f"no such host in {self.inventory} or ansible exited "
                             f"with {getattr(result, 'rc', '?')} (see {self.events_file})")
        if kind == "runner_on_failed" and check:
            raise HostFailed(host, what, failure_message(res))
        return res
