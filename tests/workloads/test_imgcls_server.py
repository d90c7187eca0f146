"""The real image classification server: with an injected tiny model (torch CPU, in-process), and
as a process with torchvision's ResNet152 in its own environment (scripts/setup --imgcls-env)."""

import asyncio
import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch==2.13.0 not installed (pip install torch==2.13.0)")

import aiohttp  # noqa: E402
from aiohttp.test_utils import TestServer  # noqa: E402

from testbed.load.api import build_request, check_response  # noqa: E402
from testbed.load.content import ContentSet  # noqa: E402

SERVER = Path(__file__).resolve().parents[2] / "workloads" / "imgcls" / "server.py"


def load_server():
    spec = importlib.util.spec_from_file_location("imgcls_server", SERVER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class TinyNet(torch.nn.Module):
    """3 classes from the mean of each colour channel: red, green or blue wins."""

    def forward(self, x):
        return x.mean(dim=(2, 3)) * 10


class Counting(TinyNet):
    """TinyNet that records the shape of every forward pass."""

    def __init__(self, calls: list):
        super().__init__()
        self.calls = calls

    def forward(self, x):
        self.calls.append(tuple(x.shape))
        return super().forward(x)


def test_preprocess_shape_and_normalisation():
    server = load_server()
    img = ContentSet(n_images=1).images(1)[0]
    arr = server.preprocess(img)
    assert arr.shape == (3, 224, 224) and arr.dtype.name == "float32"
    assert -3 < arr.mean() < 3
    with pytest.raises(ValueError, match="cannot decode"):
        server.preprocess(b"not an image")


def test_classify_batch_runs_one_batched_forward_pass():
    server = load_server()
    calls = []
    clf = server.Classifier(Counting(calls), ["red", "green", "blue"], device="cpu")

    async def main():
        async with TestServer(server.make_app(clf), host="127.0.0.1") as srv, aiohttp.ClientSession() as s:
            req = build_request("imgcls", ContentSet(seed=3, n_images=8))
            async with s.post(str(srv.make_url(req.target)), data=req.body, headers=req.headers) as r:
                ok = (r.status, await r.read())
            async with s.post(str(srv.make_url("/classify_batch")), data=b"x") as r:
                bad = r.status
            return ok, bad

    (status, body), bad = asyncio.run(main())
    assert status == 200 and bad == 400
    check_response("imgcls", body)
    preds = json.loads(body)["predictions"]
    assert len(preds) == 4 and {p["label"] for p in preds} <= {"red", "green", "blue"}
    assert all(0 < p["score"] <= 1 for p in preds)
    assert calls == [(4, 3, 224, 224)]


def _imgcls_python() -> Path:
    """The real server's own environment (`scripts/setup --imgcls-env`, which CI runs), or a skip."""
    import os

    given = os.environ.get("TESTBED_IMGCLS_PYTHON")
    venv = SERVER.parents[2] / ".venv-imgcls"
    if given:
        return Path(given)
    if (venv / "complete").is_file():
        return venv / "bin" / "python"
    pytest.skip("no environment for the real ResNet152 server: run scripts/setup --imgcls-env "
                "(torchvision does not import beside the CPU torch 2.13.0; CI builds it)")


def test_real_resnet152_server_answers_real_requests(tmp_path, capsys):
    """workloads/imgcls/server.py as it runs in its image: torchvision's ResNet152 (random weights,
    no download), its HTTP API on a real port, requests built by the load client."""
    import socket
    import subprocess
    import time

    python = _imgcls_python()
    weights = tmp_path / "resnet152.pth"
    subprocess.run([str(python), "-c",
                    "import sys, torch; from torchvision.models import resnet152; "
                    "torch.save(resnet152(weights=None).state_dict(), sys.argv[1])", str(weights)],
                   check=True, timeout=300)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path / "server.log").open("wb")
    t0 = time.monotonic()
    proc = subprocess.Popen([str(python), str(SERVER), "--weights", str(weights), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=log, stderr=log)

    async def main():
        async with aiohttp.ClientSession() as s:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 300
            while True:  # startup: model construction, weights, a warm-up pass
                assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
                try:
                    async with s.get(base + "/healthz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                assert time.monotonic() < deadline, "server not ready in 300 s"
                await asyncio.sleep(0.5)
            ready_s = time.monotonic() - t0
            answers, latencies = [], []
            content = ContentSet(seed=5, n_images=8)
            for _ in range(3):
                req = build_request("imgcls", content)
                t = time.monotonic()
                async with s.post(base + req.target, data=req.body, headers=req.headers) as r:
                    answers.append((r.status, await r.read()))
                latencies.append((time.monotonic() - t) * 1000)
            return ready_s, answers, latencies

    try:
        ready_s, answers, latencies = asyncio.run(main())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    for status, body in answers:
        assert status == 200, body[:500]
        check_response("imgcls", body)
        doc = json.loads(body)
        assert doc["model"] == "resnet152" and len(doc["predictions"]) == 4
        assert all(isinstance(p["label"], str) and 0 < p["score"] <= 1 for p in doc["predictions"])
    inference = [json.loads(b)["inference_ms"] for _, b in answers]
    with capsys.disabled():  # the figure belongs in the test output, not only in a log
        print(f"\n[real ResNet152 on this machine's CPU] ready after {ready_s:.1f} s; "
              f"4-image request: {', '.join(f'{x:.0f}' for x in latencies)} ms "
              f"(inference {', '.join(f'{x:.0f}' for x in inference)} ms)")



def test_with_a_batch_size_requests_share_one_forward_pass():
    server = load_server()
    calls = []
    clf = server.Classifier(Counting(calls), ["red", "green", "blue"], device="cpu")

    async def main():
        app = server.make_app(clf, batch=3, batch_wait_s=2.0)
        async with TestServer(app, host="127.0.0.1") as srv, aiohttp.ClientSession() as s:
            content = ContentSet(seed=3, n_images=8)

            async def one():
                req = build_request("imgcls", content)
                async with s.post(str(srv.make_url(req.target)), data=req.body, headers=req.headers) as r:
                    return r.status, await r.read()

            return await asyncio.gather(one(), one(), one())

    out = asyncio.run(main())
    assert [st for st, _ in out] == [200, 200, 200]
    for _, body in out:
        check_response("imgcls", body)
        assert len(json.loads(body)["predictions"]) == 4
    assert calls == [(12, 3, 224, 224)]  # three requests of four images, one pass
