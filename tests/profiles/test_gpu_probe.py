"""bench/gpu_curve.py, the project's GPU probe, on this machine's CPU at a tiny size: a model (the
built-in tiny net, no torchvision) and a real local HTTP service started by the probe (--serve);
its JSON is the H200 files' shape and `testbed sim fit-gpu` reads it (issue 42)."""

import importlib.util
import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# the probe runs torch in its own processes: found, not imported here (a second of every worker's
# collection)
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="the probe needs torch (pip install torch==2.13.0: extra drl or imgcls)")

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "bench" / "gpu_curve.py"
TINY = ["--size", "32", "--warm", "2", "--reps", "5", "--cap-s", "30", "--budget-s", "120"]


def _probe(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROBE), "probe", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def _stats_ok(by: dict, sizes: list[int]) -> None:
    assert sorted(by, key=int) == [str(s) for s in sizes]
    for st in by.values():
        assert st["n"] == 5 and 0 < st["p10_ms"] <= st["median_ms"] <= st["p90_ms"]


def test_the_probe_measures_a_model_against_batch_and_neighbours_and_says_why_no_shares(tmp_path):
    out = tmp_path / "tiny"
    r = _probe("--model", "tiny", "--out", str(out), "--images", "1", "2", "4", "--neighbours", "1",
               "--neighbour-images", "2", *TINY)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    assert "errors" not in doc, doc.get("errors")
    assert doc["info"]["device"] == "cpu" and doc["images_per_request"] == 4
    _stats_ok(doc["batch"]["by_images"], [1, 2, 4])
    assert "no GPU" in doc["mps_start"] and doc["mps"] == {"skipped": doc["mps_start"]}
    rows = doc["interf_timesliced"]  # no MPS: the neighbours share the device by time
    assert list(rows) == ["n"]
    _stats_ok(rows["n"]["by_images"], [1, 2, 4])
    assert rows["n"]["neighbours_ready"] and rows["n"]["neighbours"][0]["passes_per_s"] > 0
    fit = subprocess.run([sys.executable, str(PROBE), "fit", str(out / "results.json"), "--json"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert fit.returncode == 0, fit.stderr[-2000:]
    assert len(json.loads(fit.stdout)["points"]) == 3  # batch 0.25, 0.5 and 1 (4 images a request)


SERVICE = textwrap.dedent('''
    import asyncio, sys
    from aiohttp import web

    async def classify(request):
        body = await request.read()
        await asyncio.sleep(0.02)
        return web.json_response({"bytes": len(body)})

    app = web.Application()
    app.router.add_post("/classify_batch", classify)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
''')


def test_the_probe_measures_an_http_service_it_starts(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "service.py").write_text(SERVICE)
    (tmp_path / "body.bin").write_bytes(b"x" * 1000)
    out = tmp_path / "http"
    r = _probe("--url", f"http://127.0.0.1:{port}/classify_batch", "--body", str(tmp_path / "body.bin"),
               "--batches", "1", "4", "--neighbours", "0", "--out", str(out), *TINY, "--ready-s", "60",
               "--serve", sys.executable, str(tmp_path / "service.py"), str(port))
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    assert "errors" not in doc, doc.get("errors")
    assert doc["images_per_request"] == 1 and doc["unit"] == "concurrent requests per burst"
    by = doc["batch"]["by_images"]
    _stats_ok(by, [1, 4])
    assert by["1"]["median_ms"] >= 20  # the service's own 20 ms: the probe waited for its answers
    with socket.socket() as s:  # the probe stopped the service it started
        assert s.connect_ex(("127.0.0.1", port)) != 0
    bad = _probe("--url", "http://127.0.0.1:9/x", "--body", str(tmp_path / "none.bin"), "--out", str(out))
    assert bad.returncode != 0 and "--body" in bad.stderr
