"""Run the dissertation's published SimPy simulator (tu-nv/drafas, `drl/`) from a checkout.

Nothing of it is copied here: this module imports `simpy_env`, `drl_utils` and
`threshold_autoscaler` from DIR/drl and drives them as its `drl.py --mode test --alg threshold`
does, with the three services sharing one pool and stepped in lock step (its threads wait for
each other every step; here they simply take turns). Needs `simpy` (pip install simpy).

Get the checkout with: git clone https://github.com/tu-nv/drafas DIR
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# our service names -> the published simulator's
THEIR_NAME = {"chatbot": "ollama", "imgcls": "pytorch", "tts": "coqui"}
TEST_SHIFT_HOURS = {"chatbot": 0, "imgcls": 8, "tts": 16}


@dataclass(frozen=True)
class RefResult:
    service: str
    slo_violation_rate: float
    instances: float
    proc_time: float
    reward: float


def _modules(ref_dir: Path):
    drl = Path(ref_dir) / "drl"
    if not (drl / "simpy_env.py").is_file():
        raise SystemExit(f"{drl}/simpy_env.py not found: git clone https://github.com/tu-nv/drafas {ref_dir}")
    try:
        import simpy
    except ImportError:
        raise SystemExit("the published simulator needs simpy: pip install simpy") from None
    del simpy
    if str(drl) not in sys.path:
        sys.path.insert(0, str(drl))
    utils = importlib.import_module("drl_utils")
    env_mod = importlib.import_module("simpy_env")
    rules = importlib.import_module("threshold_autoscaler")
    return utils, env_mod, rules


def run_reference(
    ref_dir: str | Path,
    traces_dir: str | Path,
    ratios: dict[str, float],
    *,
    total_units: int = 8,
    seed: int = 0,
    steps: int = 2880,
    services: tuple[str, ...] = ("chatbot", "imgcls", "tts"),
    with_cpu: bool = False,
) -> tuple[dict[str, RefResult], float] | tuple[dict[str, RefResult], float, float]:
    """Rule-based v2 on the test day (shifts 0/8/16 h); returns per-service means (as its
    EvalStats computes them) and lock steps per second (one step = every service advances 30 s);
    `with_cpu` adds steps per second of this process's CPU time."""
    import simpy

    utils, env_mod, rules = _modules(Path(ref_dir))
    env_mod.TOTAL_GPU = total_units  # module constants it reads at call time
    utils.TOTAL_GPU = total_units
    random.seed(seed)
    shared: dict = {}
    envs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for s in services:
            d = Path(tmp) / s
            d.mkdir()
            shift = TEST_SHIFT_HOURS[s]
            os.symlink(Path(traces_dir).resolve() / "test" / f"day7-shift{shift}h.txt", d / "trace.txt")
            conf = utils.service_configs[THEIR_NAME[s]]
            init, gpu, cap, proc, sla, startup, _ratio, rl_n, rl_d = conf
            sim = simpy.Environment()
            svc = env_mod.Service(sim, init, gpu, cap, proc, sla, startup, rl_n, rl_d)
            client = env_mod.Client(sim, svc, str(d), ratios[s])
            env = env_mod.SimpyDrafasEnv(THEIR_NAME[s], sim, svc, client, shared, "test")
            env.should_wait_other_services = False
            shared[THEIR_NAME[s]] = svc
            envs[s] = env
        sums = {s: [0.0, 0.0, 0.0] for s in services}
        obs = {}
        with contextlib.redirect_stdout(io.StringIO()):
            for s in services:
                obs[s], _ = envs[s].reset()
            started, cpu_started = time.perf_counter(), time.process_time()
            for _ in range(steps):
                for s in services:
                    o = obs[s]
                    a = rules.threshold_autoscaler_v2(o[-2], o[-4], service=THEIR_NAME[s])
                    obs[s], _r, _t, _tr, info = envs[s].step(a)
                    acc = sums[s]
                    acc[0] += float(obs[s][-2])
                    acc[1] += int(float(obs[s][-1]) * total_units)
                    acc[2] += float(info["avg_proc_time"])
            elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu_started
    out = {}
    for s, (slo, inst, proc) in sums.items():
        slo, inst, proc = slo / steps, inst / steps, proc / steps
        out[s] = RefResult(s, slo, inst, proc, -(0.9 * slo + 0.1 * inst / total_units))
    if with_cpu:
        return out, steps / elapsed, steps / cpu
    return out, steps / elapsed
