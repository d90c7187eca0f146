"""Planted regressions for bench/planted_regressions.py: with this folder on PYTHONPATH and
TESTBED_PLANT set to a name below, every Python process of a run (the test's, the runner's, each
replica and load client it starts) patches one part of the harness when that module is imported.
Never on PYTHONPATH otherwise; it only exists to show that the timed tests fail when the harness
regresses.

- client-stall: a load client blocks its event loop for 150 ms on every 4th request it sends,
  as a synchronous write in the loop would.
- replica-wakes-early / replica-wakes-late: every precise wake (a replica's end of processing, a
  client's send) returns 4 ms before its time / 6 ms after it.
- replica-cpu: a replica's handler spends 10 ms of CPU on each request before its work (issue 41
  started from 4 ms for the whole harness; at time scale 8 the harness now holds 4 in the
  replica alone).
- balancer-slow-forward: the local balancer's request to a replica takes 25 ms longer (its
  upstream pool waits before sending), inside the span the balancer times.
- ppo-holds / ppo-scales-down: every Maskable PPO agent, whatever it reads, holds its replicas /
  releases as many as the mask allows (-2, else -1): an agent that never acts, and one that reads
  no load (not timing: what ppo-testbed-ci's two checks must catch).
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import os
import sys
import time
from collections.abc import Callable
from types import ModuleType


def _client_stall(module: ModuleType) -> None:
    launch = module.LoadClient._launch
    sent = [0]

    @functools.wraps(launch)
    def planted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        sent[0] += 1
        if sent[0] % 4 == 0:
            time.sleep(0.15)
        return launch(self, *args, **kwargs)

    module.LoadClient._launch = planted


def _wakes_off(by_s: float) -> Callable[[ModuleType], None]:
    def patch(module: ModuleType) -> None:
        until = module.PreciseWake.until

        @functools.wraps(until)
        async def planted(self, when):  # type: ignore[no-untyped-def]
            await until(self, when + by_s)

        module.PreciseWake.until = planted

    return patch


def _replica_cpu(module: ModuleType) -> None:
    for name in ("ChatbotHandler", "ImgclsHandler", "TtsHandler", "SizedHandler"):
        cls = getattr(module, name)
        prepare = cls.prepare

        @functools.wraps(prepare)
        async def planted(self, request, replica, _prepare=prepare):  # type: ignore[no-untyped-def]
            spin_until = time.thread_time() + 0.010
            while time.thread_time() < spin_until:
                pass
            return await _prepare(self, request, replica)

        cls.prepare = planted


def _balancer_slow(module: ModuleType) -> None:
    exchange = module.UpstreamPool.exchange

    @functools.wraps(exchange)
    async def planted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.025)
        return await exchange(self, *args, **kwargs)

    module.UpstreamPool.exchange = planted


def _ppo_acts(choose: Callable[[tuple[int, ...]], int]) -> Callable[[ModuleType], None]:
    def patch(module: ModuleType) -> None:
        act = module.MaskablePpoPolicy.act

        @functools.wraps(act)
        def planted(self, observation, action_mask):  # type: ignore[no-untyped-def]
            return choose(tuple(action_mask))

        module.MaskablePpoPolicy.act = planted

    return patch


PLANTS: dict[str, tuple[str, Callable[[ModuleType], None]]] = {
    "client-stall": ("testbed.load.client", _client_stall),
    "replica-wakes-early": ("testbed.timer", _wakes_off(-0.004)),
    "replica-wakes-late": ("testbed.timer", _wakes_off(0.006)),
    "replica-cpu": ("testbed.cluster.handlers", _replica_cpu),
    "balancer-slow-forward": ("testbed.metrics.proxy", _balancer_slow),
    # action indices of testbed.scaler.actions.ACTIONS (-2..+2): 2 holds, 0 and 1 scale down
    "ppo-holds": ("testbed.scaler.ppo", _ppo_acts(lambda mask: 2)),
    "ppo-scales-down": ("testbed.scaler.ppo", _ppo_acts(lambda mask: 0 if mask[0] else 1 if mask[1] else 2)),
}


def _patch_once_imported(name: str, patch: Callable[[ModuleType], None]) -> None:
    """Patch module `name` once an import has run it whole. Through `__import__` rather than a
    finder on sys.meta_path: pytest puts its assertion rewriter ahead of every finder, and it
    loads the testbed package (a plugin's) itself."""
    original = builtins.__import__

    def planting_import(*args, **kwargs):  # type: ignore[no-untyped-def]
        imported = original(*args, **kwargs)
        module = sys.modules.get(name)
        if module is not None and not getattr(module.__spec__, "_initializing", False):
            builtins.__import__ = original
            patch(module)
        return imported

    builtins.__import__ = planting_import


_name = os.environ.get("TESTBED_PLANT")
if _name:
    if _name not in PLANTS:
        raise SystemExit(f"TESTBED_PLANT={_name}: not one of {', '.join(PLANTS)}")
    _patch_once_imported(*PLANTS[_name])
