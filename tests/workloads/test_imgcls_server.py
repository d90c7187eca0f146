"""The real image classification server with an injected tiny model (torch CPU); the ResNet152
construction only where torchvision imports."""

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

    class Counting(TinyNet):
        def forward(self, x):
            calls.append(tuple(x.shape))
            return super().forward(x)

    clf = server.Classifier(Counting(), ["red", "green", "blue"], device="cpu")

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


def _torchvision():
    """torchvision, or a skip that says why not. PyPI's torchvision 0.28.0 (the release for torch
    2.13.0) is the CUDA build: beside the CPU torch its `_C.so` needs libc10_cuda.so and the
    import stops with RuntimeError "operator torchvision::nms does not exist", not ImportError."""
    try:
        import torchvision
    except Exception as exc:  # any import failure is a reason to skip, shown
        pytest.skip(f"torchvision not importable beside torch {torch.__version__}: "
                    f"{type(exc).__name__}: {exc}")
    return torchvision


def test_resnet152_construction_from_a_weights_file(tmp_path):
    _torchvision()
    from torchvision.models import resnet152

    path = tmp_path / "resnet152.pth"
    torch.save(resnet152(weights=None).state_dict(), path)  # random weights, same architecture
    model, labels = load_server().build_resnet152(str(path))
    assert len(labels) == 1000 and sum(p.numel() for p in model.parameters()) > 60_000_000
