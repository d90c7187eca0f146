"""Fakes for the lab backends' unit tests (named as fakes: nothing here talks to a lab)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from testbed.lab.hosts import CommandResult, HostFailed
from testbed.load.trace import constant_schedule

RECORDS = Path(__file__).parent / "fixtures" / "samples" / "imgcls-client.jsonl"


class FakeHosts:
    """A `HostRunner` that records each call. UE host `ran1` has the PDU sessions given as
    (tun, address); units are active from `systemd-run` until `systemctl stop`; `fetch` of a
    client's records writes its planned number of records from a sample of a real local-profile
    client's records."""

    def __init__(self, sessions: Sequence[tuple[str, str]] = (("uesimtun0", "10.45.0.2"),
                                                              ("uesimtun1", "10.45.0.3"),
                                                              ("uesimtun2", "10.46.0.2"),
                                                              ("uesimtun3", "10.46.0.3")),
                 unreachable: set[str] = frozenset()):
        self.sessions = list(sessions)
        self.unreachable = set(unreachable)
        self.calls: list[tuple[str, str, tuple[str, ...]]] = []
        self.active: set[str] = set()

    def run(self, host: str, argv: Sequence[str], *, what: str, check: bool = True
            ) -> CommandResult:
        argv = tuple(str(a) for a in argv)
        self.calls.append(("run", host, argv))
        if host in self.unreachable:
            raise HostFailed(host, what, "Failed to connect to the host via ssh: Connection "
                             "refused", unreachable=True)
        if argv[:3] == ("ip", "-o", "-4"):
            lines = ["1: lo    inet 127.0.0.1/8 scope host lo"]
            lines += [f"{9 + i}: {tun}    inet {a}/32 scope global {tun}"
                      for i, (tun, a) in enumerate(self.sessions)]
            return CommandResult(0, "\n".join(lines))
        if argv[0] == "systemd-run":
            self.active.add(argv[argv.index("--unit") + 1])
        if argv[:2] == ("systemctl", "stop"):
            self.active -= set(argv[2:])
        if argv[:2] == ("systemctl", "is-active"):
            return CommandResult(0, "\n".join("active" if u in self.active else "inactive"
                                              for u in argv[2:]))
        return CommandResult(0, "")

    def copy(self, host: str, src: Path, dest: str, *, what: str) -> None:
        self.calls.append(("copy", host, (str(src), dest)))

    def fetch(self, host: str, src: str, dest: Path, *, what: str) -> None:
        self.calls.append(("fetch", host, (src, str(dest))))
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.endswith(".jsonl"):
            dest.write_text(self._client_records(src))
        elif src.endswith(".json"):
            dest.write_text("{}")
        else:
            dest.write_text("")

    def _client_records(self, src: str) -> str:
        """As many records as the client started with `--out src` planned (a client that sent its
        whole schedule), cycling through the sample; the sample as it is for any other client."""
        sample = RECORDS.read_text().splitlines()
        for argv in self.commands():
            if argv[0] == "systemd-run" and "--out" in argv and argv[argv.index("--out") + 1] == src \
                    and "--rate" in argv and "--duration" in argv:
                rate, duration = (float(argv[argv.index(o) + 1]) for o in ("--rate", "--duration"))
                planned = sum(1 for _ in constant_schedule(rate, duration))
                rows = [json.loads(sample[i % len(sample)]) | {"seq": i} for i in range(planned)]
                return "".join(json.dumps(r) + "\n" for r in rows)
        return "".join(line + "\n" for line in sample)

    def commands(self, host: str | None = None) -> list[tuple[str, ...]]:
        return [argv for kind, h, argv in self.calls if kind == "run" and host in (None, h)]
