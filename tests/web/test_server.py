"""The live page's server: what it serves and what it never does (no file of the run directory by
its path, no secret of the manifest), to this machine's names only, to several browsers at once
from one fold, and its port refused in one line when taken."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.errors import StateError
from testbed.web.server import ASSETS, LivePage, bind, parse_address, serve
from testbed.web.sources import ReproduceSource, RunSource, source_for
from tests.web.written_run import SECRET, WrittenRun, record


@contextlib.contextmanager
def served(source: RunSource) -> Iterator[str]:
    """`serve` on a free port of 127.0.0.1 in a thread of its own; its base URL."""
    sock = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    page = LivePage(source, loopback_only=True)
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(page, sock, stop=stop),),
                              daemon=True)
    thread.start()
    try:
        yield url
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


def get(url: str, host: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def events(url: str, count: int, timeout: float = 10.0) -> list[tuple[str, dict]]:
    """The first `count` server-sent events of `url`."""
    out: list[tuple[str, dict]] = []
    with urllib.request.urlopen(url, timeout=timeout) as r:
        name = None
        for raw in r:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name:
                out.append((name, json.loads(line[6:])))
                if len(out) >= count:
                    break
    return out


def test_it_serves_the_page_and_the_runs_figures_and_no_file_by_its_path(tmp_path: Path):
    run = WrittenRun(tmp_path)
    run.start_load()
    run.write_records([record(i, 2 + 0.2 * i, 50.0) for i in range(1, 20)])
    run.write_problem("a problem of the cell")
    run.finish()
    (run.path / "report.html").write_text("<html>the report</html>")
    (run.path / "plots").mkdir()
    (run.path / "plots" / "services.png").write_bytes(b"\x89PNG")
    (run.cell / "logs").mkdir()
    (run.cell / "logs" / "client-0.log").write_text(SECRET)
    with served(source_for(run.path)) as url:
        status, page = get(url + "/")
        assert status == 200 and b"live.js" in page
        for name in ASSETS:
            assert get(f"{url}/static/{name}")[0] == 200, name
        assert get(url + "/report.html") == (200, b"<html>the report</html>")
        assert get(url + "/plots/services.png")[0] == 200
        everything = b"".join(get(url + p)[1] for p in (
            "/", "/api/overview", "/api/snapshot", "/report.html", "/static/live.js"))
        everything += json.dumps(events(url + "/api/stream", 2)).encode()
        assert b"a problem of the cell" in everything  # the cell's figures and problems are there
        assert SECRET.encode() not in everything  # its key seed, keys, database address, argv not
        for path in ("/manifest.json", "/results.json", "/cells/00-base/rep-0/cell.json",
                     "/static/../manifest.json", "/static/%2e%2e/manifest.json",
                     "/static/index.html/../../manifest.json", "/static/server.py",
                     "/plots/..%2fmanifest.json", "/plots/services.png/..", "/runs/x/report.html",
                     f"/runs/{run.path.name}/manifest.json", "/cells/", "/logs/client-0.log",
                     f"/runs/{run.path.name}/plots/..%2f..%2fmanifest.json"):
            status, body = get(url + path)
            assert status == 404 and SECRET.encode() not in body, path


def test_only_this_machines_names_may_ask(tmp_path: Path):
    run = WrittenRun(tmp_path)
    with served(source_for(run.path)) as url:
        assert get(url + "/api/overview", host="localhost")[0] == 200
        assert get(url + "/api/overview", host="evil.example:8080")[0] == 403  # DNS rebinding
        assert get(url + "/api/overview", host="127.0.0.1.evil.example")[0] == 403


def test_browsers_watching_at_once_get_a_snapshot_then_what_the_run_adds(tmp_path: Path):
    run = WrittenRun(tmp_path)
    run.start_load()
    run.write_records([record(1, 2.0, 50.0)])
    with served(source_for(run.path)) as url:
        got: list[list[tuple[str, dict]]] = [[], [], []]

        def watch(k: int) -> None:
            got[k] = events(url + "/api/stream", 8)

        threads = [threading.Thread(target=watch, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        run.write_records([record(i, 2.0 + 0.3 * i, 50.0) for i in range(2, 12)])
        run.write_decision(6.0, applied=1)
        for t in threads:
            t.join(20)
    for seen in got:
        kinds = [k for k, _ in seen]
        assert kinds[:2] == ["overview", "snapshot"] and "delta" in kinds, kinds
        answered = sum(sum(d["cells"][0]["services"]["imgcls"]["rate"])
                       for k, d in seen if k == "snapshot")
        decisions = [x for k, d in seen if k == "delta" for c in d["cells"] for x in c["decisions"]]
        added = [(k, d) for k, d in seen if k == "delta" and d["cells"] and
                 d["cells"][0]["services"].get("imgcls", {}).get("rate")]
        assert answered == 1 and decisions and added


def test_a_port_in_use_and_a_bad_address_are_one_line_each():
    taken = bind("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(StateError, match=f"127.0.0.1:{port}: the port is in use"):
            bind("127.0.0.1", port)
    finally:
        taken.close()
    assert parse_address("8080") == ("127.0.0.1", 8080)
    assert parse_address("0.0.0.0:0") == ("0.0.0.0", 0)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    for bad in ("http", "host:port", "127.0.0.1:70000", ""):
        with pytest.raises(StateError, match="expected \\[HOST:\\]PORT"):
            parse_address(bad)


def test_a_folder_that_is_no_run_is_refused_and_a_reproduce_is_followed(tmp_path: Path):
    with pytest.raises(StateError, match="no such run directory"):
        source_for(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StateError, match="is not a run directory"):
        source_for(tmp_path / "empty")
    out = tmp_path / "repro"
    partial = tmp_path / "repro.partial"
    (partial / "done").mkdir(parents=True)
    (partial / "done" / "fig5.7.json").write_text(json.dumps(
        {"artefact": "fig5.7", "title": "Fig 5.7", "verdict": "PASS", "summary": "s", "seconds": 1}))
    run = WrittenRun(partial / "runs")
    source = source_for(out)
    assert isinstance(source, ReproduceSource)
    source.poll()
    assert source.newest == run.path.name
    assert source.overview()["artefacts"][0]["verdict"] == "PASS"
    partial.rename(out)  # the report written: <out>.partial becomes <out>
    run.path = out / "runs" / run.path.name
    run.cell = run.path / run.cell.relative_to(partial / "runs" / run.path.name)
    run.start_load()
    run.write_records([record(1, 2.0, 50.0)])
    source.poll()
    fold = source.runs[run.path.name]
    assert fold.path == out / "runs" / run.path.name
    assert sum(fold.snapshot()["cells"][0]["services"]["imgcls"]["rate"]) == 1
