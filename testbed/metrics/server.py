"""A Prometheus server of a run's own: Debian's `prometheus` binary with a generated config and data
directory, listening on 127.0.0.1 of the network namespace it was started in, scraping the given
targets every interval; stopped and its directory removed by `stop()` (and, after a crash, by the
testbed's `down`, which kills what runs in its namespaces and removes the directory)."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from testbed.errors import MissingRequirement, StateError

BINARY = "prometheus"


def find_prometheus() -> str:
    """The server's path, or one line saying how to get it (before anything starts)."""
    path = shutil.which(BINARY)
    if path is None:
        raise MissingRequirement("--metrics prometheus needs the `prometheus` server on PATH "
                                 "(Debian/Ubuntu: apt-get install prometheus; scripts/setup does)")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get_json(url: str, timeout_s: float = 2.0) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


class PrometheusServer:
    """`async with PrometheusServer(workdir, ["127.0.0.1:9100"]) as prom: prom.url`"""

    def __init__(self, workdir: Path, targets: list[str], *, scrape_interval_s: float = 1.0,
                 binary: str | None = None, log: Path | None = None,
                 labels: dict[str, str] | None = None):
        """`labels`: added to every scraped series, as the lab's pod relabelling adds
        `namespace`, `pod` and `app`."""
        if not targets:
            raise ValueError("a Prometheus server needs at least one target")
        self.workdir = workdir
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self.binary = binary or find_prometheus()
        self.log = log or workdir / "prometheus.log"
        self.labels = dict(labels or {})
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def interval(self) -> str:
        return f"{max(round(self.scrape_interval_s * 1000), 10)}ms"

    def config(self) -> dict:
        return {
            "global": {"scrape_interval": self.interval, "scrape_timeout": self.interval,
                       "evaluation_interval": "15s"},
            "scrape_configs": [{"job_name": "testbed", "metrics_path": "/metrics",
                                "static_configs": [{"targets": self.targets,
                                                    "labels": self.labels}]}],
        }

    async def __aenter__(self) -> PrometheusServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    async def start(self, timeout_s: float = 30.0) -> None:
        """Start it and wait until every target has been scraped once."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(self.config()))
        self.port = _free_port()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={self.workdir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}",
                 "--storage.tsdb.retention.time=1d", "--log.level=warn"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        try:
            await self._wait_scraped(timeout_s)
        except BaseException:
            self.stop()
            raise

    async def _wait_scraped(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        health: dict[str, str] = {}
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] or ["-"]
                raise StateError(f"prometheus exited with status {self.proc.returncode} at start "
                                 f"({self.log}: {tail[0]})")
            doc = await asyncio.to_thread(_get_json, f"{self.url}/api/v1/targets?state=active")
            if doc and doc.get("status") == "success":
                active = doc["data"].get("activeTargets", [])
                health = {t["labels"].get("instance", "?"): t.get("health", "?") for t in active}
                if len(health) == len(self.targets) and all(h == "up" for h in health.values()):
                    return
            await asyncio.sleep(0.1)
        raise StateError(f"prometheus at {self.url} did not scrape its targets within "
                         f"{timeout_s:g} s (health: {health or 'no answer'})")

    def stop(self) -> None:
        """Stop the server and remove its directory; safe twice."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.workdir, ignore_errors=True)
