"""Image classification service: `POST /classify_batch` with four JPEGs (multipart field `files`),
resize/normalize, one batched forward pass of ResNet152, top-1 labels and scores as JSON.

Run: `python3 server.py --weights /models/resnet152.pth --port 8080` (GPU when available).
The model and labels are injectable (`make_app(model, labels)`), so tests use a tiny model.

Two modes (`--mode`, env TESTBED_IMGCLS_MODE):
- `overlap` (default): each request's JPEGs are decoded, resized and normalised in a thread pool
  sized to the pod's CPUs, outside the lock; only the forward pass holds it. While one request's
  forward pass runs, the next ones are preprocessed, so at batch 1 the throughput is bound by the
  forward pass at the replica's GPU share, not by the CPU.
- `serial`: preprocessing and the forward pass together under the lock, one request at a time: the
  dissertation's server, which its Table 4.4 times and Chapter 5 figures were measured on. On an
  H200 it served about 20 requests/s at 47-49 ms a request at the whole GPU and at a 25 % share
  alike, while the forward pass on 4 images takes 12 ms (testbed/profiles/gpu/h200/).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from aiohttp import web
from PIL import Image, UnidentifiedImageError

MODE_ENV = "TESTBED_IMGCLS_MODE"  # testbed/cluster/manifest.py names it in the lab's manifests
MODES = ("overlap", "serial")
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def preprocess(data: bytes, resize: int = 256, crop: int = 224) -> np.ndarray:
    """The ImageNet evaluation transform: shorter side to 256, centre crop 224, scale to [0,1],
    normalize; returns CHW float32. Raises ValueError for data that is not an image."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            rgb = img.convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"cannot decode image: {exc}") from None
    w, h = rgb.size
    scale = resize / min(w, h)
    rgb = rgb.resize((max(crop, round(w * scale)), max(crop, round(h * scale))), Image.Resampling.BILINEAR)
    w, h = rgb.size
    left, top = (w - crop) // 2, (h - crop) // 2
    arr = np.asarray(rgb.crop((left, top, left + crop, top + crop)), dtype=np.float32) / 255.0
    return ((arr - MEAN) / STD).transpose(2, 0, 1)


def prepare(images: list[bytes]) -> np.ndarray:
    """`preprocess` of each image, stacked: N x 3 x 224 x 224 float32."""
    return np.stack([preprocess(b) for b in images])


def pod_cpus() -> int:
    """CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota (a pod's limit)."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        from pathlib import Path

        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(float(quota) / float(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


class Classifier:
    """A model, its labels and device; `classify` runs one batched forward pass."""

    def __init__(self, model: torch.nn.Module, labels: Sequence[str], device: str | None = None):
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.eval().to(self.device)
        self.labels = list(labels)

    def classify(self, images: list[bytes]) -> list[dict[str, object]]:
        """Preprocess `images` and run one forward pass over them (the serial mode's unit of work)."""
        return self.forward(prepare(images))

    @torch.inference_mode()
    def forward(self, arrays: np.ndarray) -> list[dict[str, object]]:
        """One forward pass over preprocessed images (N x 3 x 224 x 224): top-1 label and score each."""
        batch = torch.from_numpy(arrays).to(self.device)
        probs = torch.softmax(self.model(batch), dim=1)
        scores, idx = probs.max(dim=1)
        return [
            {"label": self.labels[i] if i < len(self.labels) else str(i), "index": i, "score": round(s, 4)}
            for i, s in zip(idx.tolist(), scores.tolist(), strict=True)
        ]


def build_resnet152(weights_path: str | None = None) -> tuple[torch.nn.Module, list[str]]:
    """torchvision's ResNet152 with the pretrained IMAGENET1K_V2 weights from a local file (or the
    torch hub cache baked into the image); labels from the weights' metadata."""
    from torchvision.models import ResNet152_Weights, resnet152

    weights = ResNet152_Weights.IMAGENET1K_V2
    labels = list(weights.meta["categories"])
    if weights_path:
        model = resnet152(weights=None)
        model.load_state_dict(torch.load(weights_path, map_location="cpu", weights_only=True))
    else:
        model = resnet152(weights=weights)
    return model, labels


def make_app(classifier: Classifier, expected_files: int = 4, batch: int | None = None,
             batch_wait_s: float | None = None, mode: str | None = None,
             workers: int | None = None) -> web.Application:
    """`batch` (TESTBED_BATCH_SIZE, default 1): requests classified in one forward pass; a batch
    closes when full or `batch_wait_s` (TESTBED_BATCH_WAIT_MS, default 125 ms = a quarter of the
    500 ms SLO) after its first request. `mode` (TESTBED_IMGCLS_MODE): `overlap` (default)
    preprocesses outside the lock in `workers` threads (default: the pod's CPUs), `serial` inside
    it, as the dissertation's server did."""
    mode = mode or os.environ.get(MODE_ENV, "overlap")
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV} must be one of {', '.join(MODES)}, got {mode!r}")
    serial = mode == "serial"
    pool = None if serial else ThreadPoolExecutor(workers or pod_cpus(), thread_name_prefix="preprocess")
    lock = asyncio.Lock()  # one forward pass at a time: the vGPU is the replica's capacity
    batch = batch if batch is not None else int(os.environ.get("TESTBED_BATCH_SIZE", "1"))
    wait_s = batch_wait_s if batch_wait_s is not None else \
        float(os.environ.get("TESTBED_BATCH_WAIT_MS", "125")) / 1000.0
    queue: list[tuple[list[bytes] | np.ndarray, asyncio.Future]] = []
    kick = asyncio.Event()
    state: dict[str, asyncio.Task | None] = {"batcher": None}

    async def batcher() -> None:
        while queue:
            deadline = time.perf_counter() + wait_s
            while len(queue) < batch and time.perf_counter() < deadline:
                kick.clear()
                try:
                    await asyncio.wait_for(kick.wait(), deadline - time.perf_counter())
                except TimeoutError:
                    break
            take = queue[:batch]
            del queue[:batch]
            try:
                async with lock:
                    if serial:
                        images = [f for files, _ in take for f in files]
                        preds = await asyncio.to_thread(classifier.classify, images)
                    else:
                        arrays = np.concatenate([x for x, _ in take])
                        preds = await asyncio.to_thread(classifier.forward, arrays)
            except ValueError as exc:
                for _, fut in take:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            at = 0
            for files, fut in take:
                if not fut.done():
                    fut.set_result(preds[at: at + len(files)])
                at += len(files)

    async def classify(files: list[bytes]) -> list[dict[str, object]]:
        loop = asyncio.get_running_loop()
        work: list[bytes] | np.ndarray = files
        if not serial:  # preprocess outside the lock, beside the forward pass of earlier requests
            work = await loop.run_in_executor(pool, prepare, files)
        if batch <= 1:
            async with lock:
                if serial:
                    return await asyncio.to_thread(classifier.classify, files)
                return await asyncio.to_thread(classifier.forward, work)
        fut: asyncio.Future = loop.create_future()
        queue.append((work, fut))
        kick.set()
        task = state["batcher"]
        if task is None or task.done():
            state["batcher"] = asyncio.create_task(batcher())
        return await fut

    async def classify_batch(request: web.Request) -> web.Response:
        files: list[bytes] = []
        try:
            reader = await request.multipart()
            async for part in reader:
                if getattr(part, "name", None) == "files":
                    files.append(await part.read())  # type: ignore[union-attr]
        except (ValueError, AssertionError):
            return web.json_response({"error": "expected multipart/form-data with field 'files'"}, status=400)
        if not files or len(files) > 4 * expected_files:
            return web.json_response({"error": f"send 1..{4 * expected_files} files"}, status=400)
        t0 = time.perf_counter()
        try:
            preds = await classify(files)
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        ms = (time.perf_counter() - t0) * 1000
        return web.json_response({"predictions": preds, "model": "resnet152", "inference_ms": round(ms, 2)})

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ready": True, "device": classifier.device, "mode": mode})

    async def close_pool(app: web.Application) -> None:
        if pool is not None:
            pool.shutdown(wait=False)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.on_cleanup.append(close_pool)
    app.router.add_post("/classify_batch", classify_batch)
    app.router.add_get("/healthz", healthz)
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", default=os.environ.get("RESNET152_WEIGHTS"), help="state_dict .pth path")
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8080")))
    ap.add_argument("--mode", choices=MODES, default=os.environ.get(MODE_ENV, "overlap"),
                    help="overlap: preprocessing beside the forward pass (default); serial: inside the "
                         "lock, as the dissertation's server")
    args = ap.parse_args()
    model, labels = build_resnet152(args.weights)
    classifier = Classifier(model, labels)
    with torch.inference_mode():  # warm-up so readiness means the first request is fast
        classifier.model(torch.zeros(4, 3, 224, 224, device=classifier.device))
    web.run_app(make_app(classifier, mode=args.mode), host=args.host, port=args.port, access_log=None)


if __name__ == "__main__":
    main()
