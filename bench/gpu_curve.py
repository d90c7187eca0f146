"""The project's GPU probe: latency against batch size, MPS share and busy neighbours, of a model or
of an HTTP service, written as JSON in the shape of the H200's files (testbed/profiles/gpu/h200/),
which `testbed sim fit-gpu` turns into a service's `gpu:` curve (issue 42).

    python3 bench/gpu_curve.py probe --model resnet152 --out DIR            # any torchvision model
    python3 bench/gpu_curve.py probe --model mypkg.models:build --out DIR   # module:callable -> nn.Module
    python3 bench/gpu_curve.py probe --url http://127.0.0.1:8080/classify_batch --body req.bin \\
        --content-type 'multipart/form-data; boundary=X' --out DIR \\
        --serve python3 workloads/imgcls/server.py --port 8080               # a service, at each share
    python3 bench/gpu_curve.py fit DIR/results.json [fit-gpu options]       # = testbed sim fit-gpu

Parts (each in its own processes, results.json rewritten after each):
  info    GPU, driver, torch, the MPS control binary
  batch   time of one pass (model: host tensor -> device, forward, softmax, argmax, back, sync) or of
          a burst of B concurrent requests (HTTP) against images per pass / B, the device as it is
  mps     the same at each CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of --shares, under an MPS daemon that
          the probe starts (nvidia-cuda-mps-control -d); without a GPU or the binary it says why not
  interf  the target at --target-share beside 0..N neighbour processes running --neighbour-model in a
          loop (interf_mps under MPS, interf_timesliced without)
`--model tiny` is a small convolutional net that needs no torchvision (a dry run on a CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
SHARE_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


def stats(seconds: list[float]) -> dict:
    """median_ms, p10_ms, p90_ms and n of durations in seconds (the H200 files' fields)."""
    ms = sorted(t * 1000 for t in seconds)
    q = lambda p: ms[min(len(ms) - 1, int(p * len(ms)))]  # noqa: E731
    return {"median_ms": round(statistics.median(ms), 3), "p10_ms": round(q(0.1), 3),
            "p90_ms": round(q(0.9), 3), "n": len(ms)}


# ------------------------------------------------------------------ workers (child processes)
def build_model(spec: str):
    """`tiny`, `module:callable` (called with no arguments) or a torchvision model name."""
    import torch

    if spec == "tiny":
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                   torch.nn.Flatten(), torch.nn.Linear(8, 10))
    if ":" in spec:
        module, attr = spec.split(":", 1)
        return getattr(importlib.import_module(module), attr)()
    import torchvision

    return torchvision.models.get_model(spec, weights=None)


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _sync(dev: str) -> None:
    import torch

    if dev == "cuda":
        torch.cuda.synchronize()


def model_worker(a: argparse.Namespace) -> dict:
    """Measure passes of `a.images` images (role measure), or run passes until a stop file appears
    (role load, a neighbour)."""
    import torch

    dev = _device()
    if dev == "cpu":  # a dry run: the measuring and neighbour processes share the CPUs, one thread each
        torch.set_num_threads(1)
    model = build_model(a.model).eval().to(dev)
    out: dict = {"share_env": os.environ.get(SHARE_ENV), "pid": os.getpid()}
    with torch.inference_mode():
        if a.role == "load":
            x = torch.randn(a.images[0], 3, a.size, a.size, device=dev)
            model(x)
            _sync(dev)
            Path(a.ready).touch()
            n, t0 = 0, time.perf_counter()
            while not Path(a.stop).exists() and time.perf_counter() - t0 < a.cap_s:
                model(x)
                _sync(dev)
                n += 1
            out["passes_per_s"] = round(n / max(time.perf_counter() - t0, 1e-9), 2)
            return out
        _wait_neighbours(a, out)
        out["by_images"] = {}
        for n in a.images:
            x_host, ts = torch.randn(n, 3, a.size, a.size), []
            for i in range(a.warm + a.reps):
                t0 = time.perf_counter()
                torch.softmax(model(x_host.to(dev)), dim=1).argmax(dim=1).cpu()
                _sync(dev)
                if i >= a.warm:
                    ts.append(time.perf_counter() - t0)
            out["by_images"][str(n)] = stats(ts)
    return out


def _wait_neighbours(a: argparse.Namespace, out: dict) -> None:
    if a.wait_ready:
        t0 = time.time()
        while time.time() - t0 < 120 and not all(Path(p).exists() for p in a.wait_ready):
            time.sleep(0.05)
        out["neighbours_ready"] = all(Path(p).exists() for p in a.wait_ready)


def http_worker(a: argparse.Namespace) -> dict:
    """Time bursts of B concurrent identical requests (B in `a.images`) until all have answered."""
    import aiohttp

    body = Path(a.body).read_bytes()
    out: dict = {"share_env": os.environ.get(SHARE_ENV), "pid": os.getpid(), "by_images": {}}
    _wait_neighbours(a, out)

    async def main() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=a.cap_s)) as s:
            async def one() -> None:
                async with s.post(a.url, data=body, headers={"Content-Type": a.content_type}) as r:
                    await r.read()
                    if r.status >= 400:
                        raise RuntimeError(f"{a.url} answered {r.status}")

            for b in a.images:
                ts = []
                for i in range(a.warm + a.reps):
                    t0 = time.perf_counter()
                    await asyncio.gather(*(one() for _ in range(b)))
                    if i >= a.warm:
                        ts.append(time.perf_counter() - t0)
                out["by_images"][str(b)] = stats(ts)

    asyncio.run(main())
    return out


def worker(a: argparse.Namespace) -> None:
    """One child process: its measurement to `a.result` as JSON (an error there too)."""
    try:
        out = http_worker(a) if a.url else model_worker(a)
    except Exception as exc:  # the orchestrator records it and goes on
        out = {"error": f"{type(exc).__name__}: {exc}"}
    if a.stop and a.role == "measure":
        Path(a.stop).touch()
    Path(a.result).write_text(json.dumps(out))


# ------------------------------------------------------------------ the orchestrator
class Probe:
    """Runs the parts in child processes and keeps `results` (the H200 files' shape) on disk."""

    def __init__(self, a: argparse.Namespace):
        from rich.console import Console

        self.a, self.console = a, Console(stderr=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="gpu_curve_"))
        self.mps_env: dict[str, str] | None = None
        self.gpu = False
        self.n = 0
        self.results: dict = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "command": " ".join(["python3", "bench/gpu_curve.py", *sys.argv[1:]]),
            "target": a.url or a.model, "images_per_request": 1 if a.url else a.images_per_request,
            "unit": "concurrent requests per burst" if a.url else "images per pass"}

    def save(self) -> None:
        self.a.out.mkdir(parents=True, exist_ok=True)
        (self.a.out / "results.json").write_text(json.dumps(self.results, indent=1))

    def spawn(self, args: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
        self.n += 1
        res = self.tmp / f"r{self.n}.json"
        base = ["--result", str(res), "--model", self.a.model, "--size", str(self.a.size),
                "--warm", str(self.a.warm), "--reps", str(self.a.reps), "--cap-s", str(self.a.cap_s)]
        p = subprocess.Popen([sys.executable, str(HERE), "worker", *base, *args],
                             env={**os.environ, **(env or {})},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return p, res

    def finish(self, p: subprocess.Popen, res: Path, cap: float) -> dict:
        try:
            tail, _ = p.communicate(timeout=cap)
        except subprocess.TimeoutExpired:
            p.kill()
            return {"error": f"timed out after {cap:.0f} s"}
        return json.loads(res.read_text()) if res.exists() else {"error": f"rc {p.returncode}",
                                                                  "tail": (tail or "")[-800:]}

    def measure(self, env: dict[str, str] | None = None, extra: list[str] = ()) -> dict:
        target = (["--url", self.a.url, "--body", str(self.a.body), "--content-type", self.a.content_type]
                  if self.a.url else [])
        sizes = self.a.batches if self.a.url else self.a.images
        p, res = self.spawn([*target, "--images", *map(str, sizes), *extra], env)
        return self.finish(p, res, self.a.cap_s * 3 + 120)

    def info(self) -> None:
        i: dict = {"mps_control": shutil.which("nvidia-cuda-mps-control")}
        smi = shutil.which("nvidia-smi")
        i["nvidia_smi"] = subprocess.run(
            [smi, "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip() \
            if smi else "unavailable: nvidia-smi not on PATH"
        import torch

        i["torch"], i["cuda"] = torch.__version__, torch.version.cuda
        i["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        self.gpu = torch.cuda.is_available()
        self.results["info"] = i

    def start_mps(self) -> None:
        exe = shutil.which("nvidia-cuda-mps-control")
        if not self.gpu:
            self.results["mps_start"] = "not started: no GPU here (torch.cuda.is_available() is False)"
        elif not exe:
            self.results["mps_start"] = "not started: nvidia-cuda-mps-control is not on PATH"
        else:
            env = {"CUDA_MPS_PIPE_DIRECTORY": str(self.tmp / "mps_pipe"),
                   "CUDA_MPS_LOG_DIRECTORY": str(self.tmp / "mps_log")}
            for d in env.values():
                Path(d).mkdir(parents=True, exist_ok=True)
            p = subprocess.run([exe, "-d"], env={**os.environ, **env}, capture_output=True, text=True,
                               timeout=30)
            self.results["mps_start"] = f"rc {p.returncode} {p.stdout.strip()} {p.stderr.strip()}".strip()
            self.mps_env = env if p.returncode == 0 else None

    def stop_mps(self) -> None:
        if self.mps_env:
            subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env={**os.environ, **self.mps_env},
                           capture_output=True, text=True, timeout=30)
            self.mps_env = None

    def served(self, env: dict[str, str]):
        """A context that starts --serve's command with `env` and waits until it answers."""
        probe = self

        class Served:
            def __enter__(self) -> None:
                self.p = None
                if probe.a.serve:
                    self.p = subprocess.Popen(probe.a.serve, env={**os.environ, **env},
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    probe.wait_answering(self.p)

            def __exit__(self, *exc: object) -> None:
                if self.p is not None:
                    self.p.terminate()
                    self.p.wait(timeout=30)

        return Served()

    def wait_answering(self, proc: subprocess.Popen) -> None:
        import urllib.error
        import urllib.request

        deadline = time.time() + self.a.ready_s
        req = urllib.request.Request(self.a.url, data=Path(self.a.body).read_bytes(),
                                     headers={"Content-Type": self.a.content_type})
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"--serve command exited with {proc.returncode} before answering")
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    if r.status < 400:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        raise RuntimeError(f"{self.a.url} did not answer within {self.a.ready_s:.0f} s")

    def batch(self) -> None:
        with self.served({}):
            self.results["batch"] = self.measure()

    def shares(self) -> None:
        if not self.mps_env:
            self.results["mps"] = {"skipped": self.results["mps_start"]}
            return
        if self.a.url and not self.a.serve:
            self.results["mps"] = {"skipped": "the service runs outside the probe: give --serve CMD to "
                                              "start it at each share"}
            return
        out: dict = {}
        for s in self.a.shares:
            env = {**self.mps_env, SHARE_ENV: str(s)}
            with self.served(env):
                out[str(s)] = self.measure({} if self.a.serve else env)
            self.results["mps"] = out
            self.save()

    def interference(self) -> None:
        key = "interf_mps" if self.mps_env else "interf_timesliced"
        out: dict = {}
        for k in self.a.neighbours:
            tag = "+".join([str(self.a.target_share if self.mps_env else "n")] * k) or "alone"
            stop = self.tmp / f"stop_{key}_{k}"
            env = {**(self.mps_env or {}), **({SHARE_ENV: str(self.a.target_share)} if self.mps_env else {})}
            neigh, ready = [], []
            for j in range(k):
                rdy = self.tmp / f"ready_{key}_{k}_{j}"
                ready.append(str(rdy))
                cap = self.a.cap_s * 3 + (self.a.ready_s if self.a.serve else 0)
                neigh.append(self.spawn(["--role", "load", "--model", self.a.neighbour_model or self.a.model,
                                         "--images", str(self.a.neighbour_images), "--ready", str(rdy),
                                         "--stop", str(stop), "--cap-s", str(cap)], env))
            with self.served(env):
                r = self.measure({} if self.a.serve else env,
                                 ["--stop", str(stop), *(["--wait-ready", *ready] if ready else [])])
            stop.touch()
            r["neighbours"] = [self.finish(p, res, 60) for p, res in neigh]
            out[tag] = r
            self.results[key] = out
            self.save()

    def run(self) -> None:
        steps = [("info", self.info), ("batch", self.batch), ("mps start", self.start_mps),
                 ("shares", self.shares), ("interference", self.interference)]
        t0 = time.time()
        try:
            for name, step in steps:
                if time.time() - t0 > self.a.budget_s:
                    self.results.setdefault("cut", []).append(f"{name}: out of --budget-s")
                    continue
                self.console.log(f"gpu_curve: {name} ...")
                try:
                    step()
                except Exception as exc:  # the other parts' figures stay
                    self.results.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
                self.results["elapsed_s"] = round(time.time() - t0, 1)
                self.save()
        finally:
            self.stop_mps()
            shutil.rmtree(self.tmp, ignore_errors=True)
        self.console.log(f"gpu_curve: done in {time.time() - t0:.0f} s -> {self.a.out / 'results.json'}")


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["probe", "worker", "fit"], help="fit FILE...: testbed sim fit-gpu")
    ap.add_argument("--out", type=Path, help="probe: directory for results.json")
    ap.add_argument("--model", default="resnet152", help="torchvision name, module:callable or tiny")
    ap.add_argument("--url", help="an HTTP service instead of a model: POST --body there")
    ap.add_argument("--body", type=Path, help="the request body's file (with --url)")
    ap.add_argument("--content-type", default="application/octet-stream")
    ap.add_argument("--serve", nargs=argparse.REMAINDER, help="the service's command (argument list), "
                    "started by the probe at each share; last option")
    ap.add_argument("--ready-s", type=float, default=300, help="wait this long for --serve to answer")
    ap.add_argument("--images", type=int, nargs="+", default=[4, 8, 16, 32, 64], help="images per pass")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="requests per burst")
    ap.add_argument("--images-per-request", type=int, default=4, help="the service's images a request")
    ap.add_argument("--size", type=int, default=224, help="image side, pixels")
    ap.add_argument("--shares", type=int, nargs="+", default=[100, 50, 25, 10])
    ap.add_argument("--target-share", type=int, default=25)
    ap.add_argument("--neighbours", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--neighbour-model", help="default: --model (with --url: resnet152)")
    ap.add_argument("--neighbour-images", type=int, default=16)
    ap.add_argument("--warm", type=int, default=8)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--cap-s", type=float, default=60, help="a child process's own time cap")
    ap.add_argument("--budget-s", type=float, default=280, help="no new part after this many seconds")
    ap.add_argument("--result")
    ap.add_argument("--role", default="measure", choices=["measure", "load"])
    ap.add_argument("--ready")
    ap.add_argument("--stop")
    ap.add_argument("--wait-ready", nargs="*")
    a = ap.parse_args(argv)
    if a.mode == "probe":
        if a.out is None:
            ap.error("probe needs --out DIR")
        if a.serve and not a.url:
            ap.error("--serve needs --url (where the service it starts answers)")
        if a.url and (a.body is None or not a.body.is_file()):
            ap.error(f"--url needs --body FILE (a request body); {a.body} is no file")
        if a.url and not a.neighbour_model:
            a.neighbour_model = "resnet152"
    return a


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fit"]:  # the fit is the CLI's: testbed sim fit-gpu, with its options
        sys.path.insert(0, str(ROOT))
        from testbed.cli import main as testbed_main

        return testbed_main(["sim", "fit-gpu", *argv[1:]])
    a = parse(argv)
    if a.mode == "worker":
        worker(a)
        return 0
    try:
        import torch  # noqa: F401
    except ImportError:
        print("gpu_curve: needs torch (pip install torch==2.13.0, the drl or imgcls extra)", file=sys.stderr)
        return 2
    Probe(a).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
