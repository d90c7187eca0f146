"""`engine: sim` cells in parallel: on this machine's cores (`--jobs N`, a process pool) or on a
Dask cluster's workers (`--dask ADDRESS`, the optional `distributed` extra).

A task is one repetition of one cell. A worker runs `simulate_cell`, which writes nothing and
returns the files of the cell's directory; this process writes them as each task finishes. A
cell's result depends on its scenario and seed alone, so the run directory, and the rows read
from it in cell order, are those of a sequential run. Workers on other machines need the package
and the scenario's traces and models at the same paths as here.

What a parallel sweep costs, and what is done about it (docs/sweeps.md has the figures):
- A worker process must start and import the simulator (about a second). On Linux the pool's
  workers are forked from this process, which has imported it already, before the live view starts
  its thread (`start_pool`); elsewhere they are spawned.
- The simulator runs its per-request passes compiled once a process has simulated about 35 days
  (`testbed.sim.passes`). Each worker would pay that apprenticeship again on the numpy path; a
  worker whose share of the sweep crosses it runs compiled from its first request instead.
- Dask's nanny starts its workers with MALLOC_TRIM_THRESHOLD_=65536, which also stops glibc from
  raising its mmap threshold: every array over 128 kB is then mapped and unmapped afresh, and a
  whole-day cell took 1.4x as long (`dask_task` gives the worker glibc's grown thresholds back).
- A sweep too short to pay for its workers (under MIN_PARALLEL_SIM_S of simulated service time)
  says so and runs its cells in turn (`too_short`).

Ctrl-C (KeyboardInterrupt) cancels what has not started, stops the pool's workers (they ignore
SIGINT themselves, so the pool is not broken half-way) or cancels the Dask futures, and
re-raises: nothing of the run keeps running.
"""

from __future__ import annotations

import ctypes
import importlib.util
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from testbed.errors import MissingRequirement, TestbedError
from testbed.scenario.matrix import Cell
from testbed.scenario.simcell import cell_inputs, simulate_cell
from testbed.sim.passes import COMPILED_AFTER_S, COMPILED_ENV, compiled_kernels

Task = tuple[Cell, int]  # a cell and a repetition
OnDone = Callable[[int, dict[str, Any]], None]  # (task index, its files)
DASK_INSTALL = 'pip install "dask[distributed]" (or the package\'s extra: pip install -e ".[distributed]")'
DASK_CONNECT_S = 30  # seconds to reach the scheduler before the run gives up


# simulated service-seconds (a cell's duration x its services with clients, summed over the
# sweep) under which the cells run in turn: two service-days take 0.1-3 s to simulate, what a
# worker's start costs
MIN_PARALLEL_SIM_S = 2 * 86400.0


def simulated_seconds(tasks: list[Task]) -> float:
    """The service-seconds a sweep simulates: each task's duration times its clients' services.

    tasks: (cell, repetition) pairs."""
    return sum(cell.scenario.duration_s * len({c.service for c in cell.scenario.clients})
               for cell, _ in tasks)


def too_short(tasks: list[Task]) -> str | None:
    """Why these tasks run in turn rather than in parallel (one line), or None when they pay.

    tasks: (cell, repetition) pairs."""
    total = simulated_seconds(tasks)
    if total >= MIN_PARALLEL_SIM_S:
        return None
    return (f"{len(tasks)} cell repetitions simulate {total / 3600:.3g} service-hours in all, too "
            "short to pay for starting workers: running them in turn")


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def workers(jobs: int, tasks: int) -> int:
    """Processes for `jobs` (0: every core) and `tasks` tasks: never more than the tasks."""
    return max(1, min(cores() if jobs == 0 else jobs, tasks))


def check_options(engine: str, jobs: int, dask: str | None) -> None:
    """Refuse, in one line, a parallel run its cells cannot take.

    engine: the scenario's engine; jobs: --jobs (1 sequential, 0 every core); dask: --dask's
    scheduler address or None."""
    if jobs < 0:
        raise TestbedError(f"--jobs {jobs}: give 1 (one cell at a time), N processes, or 0 "
                           "(every core)")
    if dask and jobs != 1:
        raise TestbedError("--jobs and --dask: give one (--dask runs the cells on the Dask "
                           "cluster's workers)")
    if engine != "sim" and (jobs != 1 or dask):
        option = "--dask" if dask else f"--jobs {jobs}"
        raise TestbedError(f"{option}: testbed-engine cells share this machine's network "
                           "namespaces and run one at a time; only `engine: sim` cells run in "
                           "parallel")
    if dask:
        require_dask()


def require_dask() -> None:
    """MissingRequirement, with how to install it, unless dask.distributed imports."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise MissingRequirement(f"--dask needs Dask's distributed scheduler: {DASK_INSTALL}"
                                 ) from None


def _start_worker(compiled: bool) -> None:
    # Ctrl-C reaches the whole process group: the parent stops the workers, they do not stop
    # themselves half-way through a task and break the pool
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if compiled:  # its share crosses COMPILED_AFTER_S anyway: compiled from the first request
        os.environ[COMPILED_ENV] = "1"
        compiled_kernels()  # numba's cache, loaded while the pool starts


def _ready() -> None:
    """A no-op task: submitted once per worker, it makes the pool start them now."""


def compiled_pays(tasks: list[Task], n: int) -> bool:
    """Whether each of `n` workers will simulate past COMPILED_AFTER_S (so runs compiled from its
    first request), numba is installed and TESTBED_SIM_COMPILED does not decide it already.

    tasks: (cell, repetition) pairs; n: the workers sharing them."""
    return (os.environ.get(COMPILED_ENV) is None
            and simulated_seconds(tasks) / n >= COMPILED_AFTER_S
            and importlib.util.find_spec("numba") is not None)


def start_pool(tasks: list[Task], jobs: int) -> ProcessPoolExecutor:
    """A started pool of `workers(jobs, len(tasks))` processes for these tasks.

    On Linux the workers are forked from this process (the simulator imported already: no
    second or more of imports each), so call this before any thread of this process starts (the
    live view's); elsewhere they are spawned. tasks: (cell, repetition) pairs; jobs: as --jobs."""
    n = workers(jobs, len(tasks))
    method = "fork" if sys.platform == "linux" else "spawn"
    pool = ProcessPoolExecutor(n, initializer=_start_worker, initargs=(compiled_pays(tasks, n),),
                               mp_context=multiprocessing.get_context(method))
    for _ in range(n):  # a fork pool starts every worker on the first; a spawn pool one each
        pool.submit(_ready)
    return pool


def run_in_pool(tasks: list[Task], base_dir: Path, jobs: int, on_done: OnDone,
                pool: ProcessPoolExecutor | None = None) -> None:
    """Every task in `pool` (default: `start_pool(tasks, jobs)`), `on_done(index, files)` as
    each finishes (in this process); a task's exception and KeyboardInterrupt stop the pool and
    propagate.

    tasks: (cell, repetition) pairs; base_dir: the scenario's folder; jobs: as --jobs."""
    pool = pool or start_pool(tasks, jobs)
    try:
        futures: dict[Future, int] = {pool.submit(simulate_cell, cell, rep, base_dir): i
                                      for i, (cell, rep) in enumerate(tasks)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in sorted(done, key=futures.__getitem__):
                on_done(futures[f], f.result())
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now (their tasks are abandoned)."""
    # Python 3.14 has pool.terminate_workers(); before it, the pool's processes are only reachable
    # through its private table
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        p.terminate()
    for p in processes:
        p.join(10)


# glibc's mallopt parameters, and the values its dynamic thresholds grow to on a 64-bit machine
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
_malloc_tuned = [False]


def restore_malloc_thresholds() -> bool:
    """Give this process glibc's grown malloc thresholds (arrays up to 32 MiB from the heap, 64 MiB
    kept before trimming), once; False where the C library is not glibc."""
    if _malloc_tuned[0]:
        return True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    _malloc_tuned[0] = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)
                            and mallopt(M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD_MAX))
    return _malloc_tuned[0]


def dask_task(cell: Cell, rep: int, base_dir: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """`simulate_cell` on a Dask worker, with the malloc thresholds its nanny lowered restored.

    cell: the matrix cell; rep: its repetition; base_dir: the scenario's folder; inputs: the
    cells' traces and profiles as the run scattered them (`simulate_cell`'s)."""
    restore_malloc_thresholds()
    return simulate_cell(cell, rep, base_dir, inputs)


def run_on_dask(tasks: list[Task], base_dir: Path, address: str, on_done: OnDone) -> None:
    """Every task on the Dask scheduler at `address` (tcp://HOST:PORT), `on_done(index, files)`
    as each finishes; KeyboardInterrupt and a task's exception cancel the rest and propagate.

    tasks: (cell, repetition) pairs; base_dir: the scenario's folder (its traces and profiles
    are sent; models and policy modules are read at the same paths on every worker)."""
    require_dask()
    from distributed import Client, as_completed

    try:
        client = Client(address, timeout=DASK_CONNECT_S)
    except (OSError, TimeoutError, ValueError) as exc:
        raise TestbedError(f"--dask {address}: cannot reach the Dask scheduler: "
                           f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                           ) from None
    with client:
        # the cells' traces and profiles, read here and sent once: a worker on another machine
        # needs no copy of them (models and policy modules it still reads at their paths)
        inputs = cell_inputs([cell.scenario for cell, _ in tasks], base_dir)
        shipped = client.scatter(inputs, broadcast=True, hash=False)
        # pure=False: two repetitions of one cell are two tasks, never one cached result
        futures = [client.submit(dask_task, cell, rep, base_dir, shipped, pure=False)
                   for cell, rep in tasks]
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for f in as_completed(futures):
                on_done(index[f.key], f.result())
        except BaseException:
            client.cancel(futures)
            raise
