"""The imgcls server's rate in each mode (issue 42): workloads/imgcls/server.py on a real port, its
real preprocessing of four ~100 kB 500x375 JPEGs a request, loaded by closed-loop aiohttp clients;
prints requests/s, p50/p99 latency and the server's own inference_ms per configuration, and writes
them in the shape of testbed/profiles/gpu/h200/imgcls-server.json.

    python3 bench/imgcls_server_rate.py --forward sleep:40 --mode both        # a CPU: a 40 ms forward
    python3 bench/imgcls_server_rate.py --forward resnet152 --mode both --out DIR   # a GPU (torchvision)

`--forward sleep:MS` injects a model whose forward pass sleeps MS (as a GPU kernel leaves the CPU
free), so the figure shows what the server's structure allows on this machine's CPUs: overlap
approaches min(1 / forward, CPUs / preprocessing), serial 1 / (forward + preprocessing).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import io
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "workloads" / "imgcls" / "server.py"


def load_server():
    spec = importlib.util.spec_from_file_location("imgcls_server", SERVER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def jpegs(n: int = 4, w: int = 500, h: int = 375) -> list[bytes]:
    """n noisy gradient JPEGs of w x h at quality 90 (about 100 kB each, as the H200's)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        x = np.linspace(0, 255, w)[None, :, None] * np.ones((h, 1, 3)) * (0.5 + 0.1 * i)
        img = np.clip(x + rng.normal(0, 25, x.shape), 0, 255).astype("uint8")
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def model(spec: str):
    import torch

    if spec.startswith("sleep:"):
        seconds = float(spec.split(":", 1)[1]) / 1000.0

        class Sleeping(torch.nn.Module):
            def forward(self, x):
                time.sleep(seconds)
                return x.mean(dim=(2, 3))

        return Sleeping()
    import torchvision

    return torchvision.models.get_model(spec, weights=None)


async def run(server, clf, mode: str, batch: int, conns: int, seconds: float, files: list[bytes]) -> dict:
    import aiohttp
    from aiohttp import web

    app = server.make_app(clf, batch=batch, mode=mode)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # the port the OS chose
    url = f"http://127.0.0.1:{port}/classify_batch"
    lat, server_ms, errors = [], [], 0
    stop = time.perf_counter() + seconds

    async def conn(s: aiohttp.ClientSession) -> None:
        nonlocal errors
        while time.perf_counter() < stop:
            form = aiohttp.FormData()
            for k, f in enumerate(files):
                form.add_field("files", f, filename=f"{k}.jpg", content_type="image/jpeg")
            t0 = time.perf_counter()
            async with s.post(url, data=form) as r:
                body = await r.read()
            if r.status != 200:
                errors += 1
                continue
            lat.append((time.perf_counter() - t0) * 1000)
            server_ms.append(json.loads(body)["inference_ms"])

    async with aiohttp.ClientSession() as s:
        async with s.post(url, data={"files": files[0]}) as r:  # warm-up
            await r.read()
        t0 = time.perf_counter()
        await asyncio.gather(*(conn(s) for _ in range(conns)))
        elapsed = time.perf_counter() - t0
    await runner.cleanup()
    lat.sort()
    return {"conns": conns, "ok": len(lat), "errors": errors, "req_per_s": round(len(lat) / elapsed, 1),
            "p50_ms": round(statistics.median(lat), 1), "p99_ms": round(lat[int(0.99 * (len(lat) - 1))], 1),
            "server_ms_median": round(statistics.median(server_ms), 1),
            "jpeg_kb": [len(f) // 1024 for f in files]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--forward", default="sleep:40", help="sleep:MS, or a torchvision model name")
    ap.add_argument("--mode", choices=["overlap", "serial", "both"], default="both")
    ap.add_argument("--batch", type=int, default=1, help="TESTBED_BATCH_SIZE")
    ap.add_argument("--conns", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--out", type=Path, help="directory for imgcls-server.json")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("imgcls_server_rate: needs torch (pip install torch==2.13.0)", file=sys.stderr)
        return 2
    server = load_server()
    files = jpegs()
    clf = server.Classifier(model(a.forward), [str(i) for i in range(1000)])
    prep = []
    for _ in range(5):
        t0 = time.perf_counter()
        server.prepare(files)
        prep.append((time.perf_counter() - t0) * 1000)
    with torch.inference_mode():
        clf.model(torch.zeros(4, 3, 224, 224, device=clf.device))
    results: dict = {"forward": a.forward, "device": clf.device, "cpus": server.pod_cpus(),
                     "preprocess_4_images_ms": round(statistics.median(prep), 1)}
    print(f"device {clf.device}, {results['cpus']} CPUs, preprocessing 4 JPEGs: "
          f"{results['preprocess_4_images_ms']} ms (median of 5), forward: {a.forward}")
    print(f"{'mode':8} {'conns':>5} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'server ms':>10}")
    for mode in (["overlap", "serial"] if a.mode == "both" else [a.mode]):
        key = f"{mode}, batch {a.batch}"
        results[key] = {"runs": []}
        for c in a.conns:
            r = asyncio.run(run(server, clf, mode, a.batch, c, a.seconds, files))
            results[key]["runs"].append(r)
            print(f"{mode:8} {c:5d} {r['req_per_s']:7.1f} {r['p50_ms']:8.1f} {r['p99_ms']:8.1f} "
                  f"{r['server_ms_median']:10.1f}", flush=True)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "imgcls-server.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
