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
from testbed.config.yamlfile import FieldPath, LocatedYaml, format_path
from testbed.errors import ConfigError, ConfigProblem, MissingRequirement

UE_GROUP = "ran"
PROMETHEUS_NODE_PORT = 30090  # the prometheus role's default (playbooks/roles/prometheus/defaults)


@dataclass
class LabInventory:
    path: Path
    groups: dict[str, list[str]] = field(default_factory=dict)
    hostvars: dict[str, dict[str, Any]] = field(default_factory=dict)
    # where each host's variables were set, for errors that point at the line
    doc: LocatedYaml | None = None
    origins: dict[str, dict[str, FieldPath]] = field(default_factory=dict)
    host_paths: dict[str, FieldPath] = field(default_factory=dict)

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
        inv = cls(path.resolve(), doc=doc)
        inv._walk("all", data["all"], {}, {}, ("all",))
        return inv

    def _walk(self, name: str, group: dict[str, Any], inherited: dict[str, Any],
              inherited_origins: dict[str, FieldPath], path: FieldPath) -> list[str]:
        group = group or {}
        own = group.get("vars") or {}
        gvars = {**inherited, **own}
        gorigins = {**inherited_origins, **{k: (*path, "vars", k) for k in own}}
        members: list[str] = []
        for host, hvars in (group.get("hosts") or {}).items():
            hvars = hvars or {}
            hpath = (*path, "hosts", host)
            self.hostvars[host] = {**gvars, **self.hostvars.get(host, {}), **hvars}
            self.origins[host] = {**gorigins, **self.origins.get(host, {}),
                                  **{k: (*hpath, k) for k in hvars}}
            if hvars or host not in self.host_paths:
                self.host_paths[host] = hpath
            members.append(str(host))
        for child, body in (group.get("children") or {}).items():
            members += self._walk(str(child), body or {}, gvars, gorigins,
                                  (*path, "children", child))
        self.groups.setdefault(name, [])
        self.groups[name] = list(dict.fromkeys([*self.groups[name], *members]))
        return members

    def hosts(self, group: str) -> list[str]:
        return list(self.groups.get(group, []))

    def var(self, host: str, name: str, default: Any = None) -> Any:
        return self.hostvars.get(host, {}).get(name, default)

    def var_path(self, host: str, name: str) -> FieldPath:
        """Where `name` of `host` is set in the file, or where it belongs when it is not set."""
        return self.origins.get(host, {}).get(name) or (*self.host_paths.get(host, ("all",)), name)

    def problem(self, host: str, name: str, message: str, *key: str | int) -> ConfigProblem:
        """A ConfigProblem at the line of `name` (or of `name`'s entry `key`) of `host`."""
        path = (*self.var_path(host, name), *key)
        line = self.doc.line_of(path) if self.doc is not None else None
        return ConfigProblem(str(self.doc.source if self.doc else self.path), line,
                             format_path(path), message)

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

    def prometheus_url(self, server: str) -> str:
        """The lab's Prometheus, as the prometheus role exposes it on the cluster server."""
        port = self.var(server, "prometheus_node_port", PROMETHEUS_NODE_PORT)
        return f"http://{self.address(server)}:{port}"

    def services_address(self, server: str) -> str:
        """Where the services' NodePorts answer (services_address, else the server's address)."""
        return str(self.var(server, "services_address") or self.address(server))

    def one(self, group: str, what: str) -> str:
        hosts = self.hosts(group)
        if not hosts:
            raise MissingRequirement(f"{self.path}: no {what}: the inventory's group {group!r} "
                                     "is empty or missing")
        return hosts[0]
