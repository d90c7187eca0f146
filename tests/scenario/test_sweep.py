"""A sim-engine sweep's cells in parallel (`--jobs`, `--dask`): the same rows as one at a time, each
row recording the matrix values it ran with; Ctrl-C leaves no worker behind; the testbed engine
refuses parallel cells in one line."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from testbed.errors import MissingRequirement, TestbedError
from testbed.report.export import export
from testbed.scenario import sweep as sweep_module
from testbed.scenario.load import load_scenario
from testbed.scenario.matrix import expand
from testbed.scenario.runner import RunOptions, run_scenario
from testbed.scenario.simcell import cell_inputs, simulate_cell
from testbed.scenario.sweep import check_options, cores, too_short, workers
from tests.conftest import default_sigint

# scenarios/sim-tables.yaml at a test's size: constant-rate clients instead of the test day's
# traces, five minutes per cell, rule v2 (no model files), two dotted keys and an alias
SWEEP = """\
name: sweep
engine: sim
duration_s: 300
scaler_period_s: 30
repetitions: 2
services:
  - {name: imgcls, policy: rule_v2}
  - {name: tts, policy: rule_v2}
clients:
  - {service: imgcls, rate: 5}
  - {service: tts, rate: 2}
matrix:
  services.imgcls.replicas: [1, 2]
  clients.0.rate: [5, 20]
  policy: [rule_v2]
expect:
""" + ("  - mean_replicas[service=imgcls, clients.0.rate=20, services.imgcls.replicas=1]"
       " > mean_replicas[service=imgcls, clients.0.rate=5, services.imgcls.replicas=1]\n")
KEYS = ("services.imgcls.replicas", "clients.0.rate", "policy")
WALL_CLOCK = ("steps_per_second", "steps_per_cpu_second")  # the simulator's speed, not a result


def sweep(tmp_path: Path, text: str = SWEEP, **options: Any) -> tuple[list[dict], str]:
    """Rows of a run of `text` (without wall-clock fields) and what it printed; its run directory
    is tmp_path/runs/*."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    out = StringIO()
    result = run_scenario(load_scenario(path), RunOptions(
        out_root=tmp_path / "runs", progress=False, console=Console(file=out, width=200),
        **options))
    assert not result.interrupted
    saved = json.loads((result.run_dir / "results.json").read_text())["rows"]
    assert saved == json.loads(json.dumps(result.rows, default=str))
    # `expect:` selects on the dotted keys (four times the load needs more replicas)
    assert [o.verdict for o in result.outcomes] == ["PASS"], result.outcomes
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in result.rows], out.getvalue()


def test_rows_record_the_values_they_ran_with(tmp_path: Path):
    rows, _ = sweep(tmp_path)
    run_dir = next((tmp_path / "runs").iterdir())
    out = StringIO()
    export(run_dir, out, "csv")
    table = list(csv.DictReader(StringIO(out.getvalue())))
    assert [{k: r[k] for k in KEYS} for r in table] == [{k: str(r[k]) for k in KEYS} for r in rows]
    assert len(rows) == 4 * 2 * 2  # cells x repetitions x services
    for r in rows:
        assert all(k in r for k in KEYS), r
        assert r["cell"].endswith(f"services.imgcls.replicas-{r['services.imgcls.replicas']}_"
                                  f"clients.0.rate-{r['clients.0.rate']}_policy-rule_v2")
    by_cell = {(r["services.imgcls.replicas"], r["clients.0.rate"]): r for r in rows
               if r["service"] == "imgcls" and r["rep"] == 0}
    assert set(by_cell) == {(1, 5), (1, 20), (2, 5), (2, 20)}
    # the values reached the simulator: replicas start where the key says
    assert by_cell[(2, 5)]["mean_replicas"] > by_cell[(1, 5)]["mean_replicas"]


@pytest.fixture
def any_length(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweeps of a test's size run in parallel as asked (too short to pay, they would not)."""
    monkeypatch.setattr(sweep_module, "MIN_PARALLEL_SIM_S", 0.0)


def test_jobs_2_gives_the_rows_of_jobs_1(tmp_path: Path, any_length: None):
    one, _ = sweep(tmp_path / "one", jobs=1)
    two, printed = sweep(tmp_path / "two", jobs=2)
    assert "8 cell repetitions on 2 processes" in printed
    assert two == one


def test_a_sweep_too_short_to_pay_says_so_and_runs_in_turn(tmp_path: Path):
    one, _ = sweep(tmp_path / "one", jobs=1)
    two, printed = sweep(tmp_path / "two", jobs=2)
    assert "8 cell repetitions simulate 1.33 service-hours in all, too short to pay" in printed
    assert "in turn" in printed and "on 2 processes" not in printed
    assert two == one


def test_a_day_long_sweep_pays(tmp_path: Path):
    from testbed.scenario.matrix import expand

    (tmp_path / "day.yaml").write_text(SWEEP.replace("duration_s: 300", "duration_s: 86400"))
    day = load_scenario(tmp_path / "day.yaml")
    tasks = [(c, rep) for c in expand(day.scenario, day.testbed) for rep in range(2)]
    assert too_short(tasks) is None and too_short(tasks[:1]) is None  # one cell: two service-days
    assert too_short([]) is not None


def test_jobs_0_is_every_core_and_never_more_than_the_tasks():
    assert workers(0, 10_000) == cores()
    assert workers(0, 1) == 1 and workers(4, 3) == 3 and workers(1, 8) == 1


@pytest.mark.parametrize("engine, jobs, dask, says", [
    ("testbed", 2, None, "--jobs 2: testbed-engine cells share this machine's network namespaces"),
    ("testbed", 0, None, "--jobs 0: testbed-engine cells"),
    ("testbed", 1, "tcp://h:8786", "--dask: testbed-engine cells"),
    ("sim", -1, None, "--jobs -1: give 1"),
    ("sim", 2, "tcp://h:8786", "--jobs and --dask: give one"),
])
def test_what_cannot_run_in_parallel_is_refused_in_one_line(engine: str, jobs: int,
                                                            dask: str | None, says: str):
    with pytest.raises(TestbedError) as exc:
        check_options(engine, jobs, dask)
    assert str(exc.value).startswith(says) and "\n" not in str(exc.value)


def test_the_cli_refuses_jobs_on_the_testbed_engine_before_anything_runs(tmp_path: Path):
    (tmp_path / "scn.yaml").write_text(
        "name: t\nduration_s: 30\nservices:\n  - {name: imgcls}\n"
        "clients:\n  - {service: imgcls, ue_group: ai, rate: 1}\n")
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", "scn.yaml", "--jobs", "2",
                           "--out", "runs"], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, COLUMNS="200"), timeout=120)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 1, lines
    assert len(lines) == 1 and "--jobs 2: testbed-engine cells share" in lines[0], lines
    assert not (tmp_path / "runs").exists()


def test_without_dask_the_option_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(MissingRequirement) as exc:
        check_options("sim", 1, "tcp://h:8786")
    assert 'pip install "dask[distributed]"' in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.timeout(300)
def test_a_dask_cluster_gives_the_rows_of_a_sequential_run(tmp_path: Path, any_length: None):
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is not installed "
                                      "(pip install -e '.[distributed]')")
    one, _ = sweep(tmp_path / "one")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        dask, printed = sweep(tmp_path / "dask", dask=cluster.scheduler_address)
    assert f"on the Dask cluster at {cluster.scheduler_address}" in printed
    assert dask == one


# a month in one-second scaler periods: ~20 s per cell here, so a worker is mid-cell at Ctrl-C
LONG = """\
name: long
engine: sim
duration_s: 2678400
scaler_period_s: 1
services:
  - {name: imgcls, policy: rule_v2}
  - {name: tts, policy: rule_v2}
  - {name: chatbot, policy: rule_v2}
clients:
  - {service: imgcls, rate: 40}
  - {service: tts, rate: 10}
  - {service: chatbot, rate: 5}
matrix:
  seed: [1, 2, 3, 4]
"""


def children(pid: int) -> set[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return {int(x) for x in out.split()}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and \
        Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"


@pytest.mark.timeout(180)
def test_ctrl_c_stops_every_worker(tmp_path: Path):
    (tmp_path / "long.yaml").write_text(LONG)
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "run", "long.yaml", "--jobs", "2",
                             "--out", "runs", "--no-progress"], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, COLUMNS="200"), preexec_fn=default_sigint)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(children(proc.pid)) < 2:  # the 2 workers
        time.sleep(0.2)
    time.sleep(1.0)  # the workers are simulating
    seen = children(proc.pid)
    assert len(seen) >= 2, "the workers did not start"
    proc.send_signal(signal.SIGINT)
    stopped = time.monotonic()
    output, _ = proc.communicate(timeout=60)
    # the workers are stopped, not waited for: their cells had most of their ~20 s to go
    assert time.monotonic() - stopped < 10, output
    assert proc.returncode == 130, output
    assert "INTERRUPTED" in output and "4 cell repetitions on 2 processes" in output
    # multiprocessing's resource tracker leaves once it reads its parent's end of the pipe
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in seen):
        time.sleep(0.2)
    assert not [p for p in seen if alive(p)]
    results = json.loads(next((tmp_path / "runs").glob("*/results.json")).read_text())
    assert results["interrupted"] is True


# a sweep of one's own from its own folder: every path relative to the scenario file
OWN = """\
name: own
engine: sim
service_profiles: profiles/own.yaml
traces_dir: data
duration_s: 600
scaler_period_s: 30
services:
  - {name: own, policy: static}
clients:
  - {service: own, trace: own-day.txt}
matrix:
  policy: [static, rule_v2, "pols.mine:Holder"]
"""
OWN_PROFILE = """\
services:
  own: {capacity: 1, queue_limit: 11, proc_time_ms: [90, 140], startup_ms: 8000, slo_ms: 800}
"""
OWN_POLICY = """\
class Holder:
    def act(self, observation, action_mask):
        return 3 if action_mask[3] else 2
"""


def own_sweep(folder: Path) -> Path:
    """The files of OWN in `folder`: the scenario, its profile, trace and policy module."""
    for name, text in {"own.yaml": OWN, "profiles/own.yaml": OWN_PROFILE,
                       "pols/mine.py": OWN_POLICY,
                       "data/own-day.txt": "60 300\n60 600\n" * 5}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder / "own.yaml"


@pytest.mark.timeout(300)
def test_a_sweep_from_its_own_folder_finds_its_files_on_dask(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            any_length: None):
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is not installed "
                                      "(pip install -e '.[distributed]')")
    own_sweep(tmp_path)
    # the workers start elsewhere (as `dask worker` does on its own), the user runs from the
    # scenario's folder, naming its files relative to it
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        monkeypatch.chdir(tmp_path)
        loaded = load_scenario("own.yaml")
        assert loaded.base_dir == tmp_path.resolve()  # resolved once, at load

        def rows(**options: Any) -> list[dict]:
            result = run_scenario(loaded, RunOptions(out_root=Path("runs"), progress=False,
                                                     console=Console(file=StringIO()), **options))
            assert not result.problems and not result.interrupted
            return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in result.rows]

        one = rows()
        dask = rows(dask=cluster.scheduler_address)
        # a worker that cannot see the trace and the profile (another machine's) runs a cell from
        # the content sent to it
        cell = expand(loaded.scenario, loaded.testbed)[1]
        here = simulate_cell(cell, 0, loaded.base_dir)
        inputs = cell_inputs(cell.scenario, loaded.base_dir)
        (tmp_path / "data").rename(tmp_path / "elsewhere")
        (tmp_path / "profiles").rename(tmp_path / "elsewhere-profiles")
        with distributed.Client(cluster.scheduler_address) as client:
            there = client.submit(simulate_cell, cell, 0, loaded.base_dir, inputs,
                                  pure=False).result()
    assert there["sim.json"].keys() == here["sim.json"].keys()
    for service, figures in here["sim.json"].items():
        assert {k: v for k, v in there["sim.json"][service].items() if k not in WALL_CLOCK} == \
            {k: v for k, v in figures.items() if k not in WALL_CLOCK}
    assert len(one) == 3 and dask == one
    assert {r["policy"] for r in one} == {"static", "rule_v2", "pols.mine:Holder"}


MAPPED_FOR_ONE_MIB = """
import ctypes, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                 "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1:] == ["restore"]:
    from testbed.scenario.sweep import restore_malloc_thresholds
    assert restore_malloc_thresholds()
before = libc.mallinfo2().hblkhd
block = bytearray(1 << 20)
print(libc.mallinfo2().hblkhd - before)
"""


def test_a_dask_workers_arrays_come_from_the_heap_again():
    """Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which pins glibc's mmap
    threshold at 128 kB: each 1 MiB array was mapped afresh (a whole-day cell 1.4x as long). After
    restore_malloc_thresholds, it comes from the heap."""
    if not hasattr(__import__("ctypes").CDLL(None), "mallinfo2"):
        pytest.skip("not glibc >= 2.33: no mallinfo2 to see where an allocation went")
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}

    def mapped(*args: str) -> int:
        out = subprocess.run([sys.executable, "-c", MAPPED_FOR_ONE_MIB, *args], env=env, check=True,
                             capture_output=True, text=True, cwd=Path(__file__).parents[2])
        return int(out.stdout)

    assert mapped() >= 1 << 20  # the nanny's setting, as a Dask worker starts with it
    assert mapped("restore") == 0
