"""The lab inventory as the scenario runner reads it: groups, host variables, UE hosts.

Reads the YAML inventory format of `playbooks/inventory.example.yml` (groups under `all.children`,
hosts with their variables, `vars:` at any level, nested `children:`). The UE hosts are the
`ran` group's hosts: the playbooks start every UE group's `nr-ue` there, so that is where each
UE's PDU session (`uesimtun*`) lives and where clients and iperf3 run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.config import load_yaml_file
from testbed.errors import ConfigError, ConfigProblem, MissingRequirement

UE_GROUP = "ran"


@dataclass
class LabInventory:
    path: Path
    groups: dict[str, list[str]] = field(default_factory=dict)
    hostvars: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> LabInventory:
        path = Path(path)
        if not path.is_file():
            raise MissingRequirement(f"inventory not found: {path}")
        doc = load_yaml_file(path)
        data = doc.data
        if not isinstance(data, dict) or not isinstance(data.get("all"), dict):
            raise ConfigError([ConfigProblem(str(path), 1, "all", "a YAML inventory with an "
                                             "`all:` group is needed (see "
                                             "playbooks/inventory.example.yml)")])
        inv = cls(path.resolve())
        inv._walk("all", data["all"], {})
        return inv

    def _walk(self, name: str, group: dict[str, Any], inherited: dict[str, Any]) -> list[str]:
        group = group or {}
        gvars = {**inherited, **(group.get("vars") or {})}
        members: list[str] = []
        for host, hvars in (group.get("hosts") or {}).items():
            merged = {**gvars, **self.hostvars.get(host, {}), **(hvars or {})}
            self.hostvars[host] = merged
            members.append(str(host))
        for child, body in (group.get("children") or {}).items():
            members += self._walk(str(child), body or {}, gvars)
        self.groups.setdefault(name, [])
        self.groups[name] = list(dict.fromkeys([*self.groups[name], *members]))
        return members

    def hosts(self, group: str) -> list[str]:
        return list(self.groups.get(group, []))

    def var(self, host: str, name: str, default: Any = None) -> Any:
        return self.hostvars.get(host, {}).get(name, default)

    def address(self, host: str) -> str:
        """How the controller reaches `host` (its ansible_host, else its name)."""
        return str(self.var(host, "ansible_host", host))

    def ue_hosts(self) -> list[str]:
        hosts = self.hosts(UE_GROUP)
        if not hosts:
            raise MissingRequirement(
                f"{self.path}: no UE hosts: the inventory's group {UE_GROUP!r} is empty or "
                "missing (the UERANSIM UEs, and so the scenario's clients and iperf3, run there)")
        return hosts

    def one(self, group: str, what: str) -> str:
        hosts = self.hosts(group)
        if not hosts:
            raise MissingRequirement(f"{self.path}: no {what}: the inventory's group {group!r} "
                                     "is empty or missing")
        return hosts[0]
