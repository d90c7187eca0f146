"""Run code inside a network namespace: a thread that enters it, so the caller never moves.

A socket belongs to the namespace its thread was in when the socket was created, and threads
and child processes inherit their creator's namespace. So a thread that enters the namespace
first and then runs an asyncio loop serves, listens and spawns processes there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

CLONE_NEWNET = 0x40000000
NETNS_RUN_DIR = "/run/netns"
T = TypeVar("T")


def enter_netns(name: str) -> None:
    """Move the calling thread into network namespace `name` (as made by `ip netns add`)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(os.path.join(NETNS_RUN_DIR, name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


class NetnsLoop:
    """An asyncio loop in its own thread inside namespace `ns`; `cancel()` is thread-safe.

        job = NetnsLoop("tb-main-dn", lambda: serve())
        job.start(); job.join(); job.result()
    """

    def __init__(self, ns: str, main: Callable[[], Coroutine[Any, Any, T]]):
        self.ns = ns
        self._main = main
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[T] | None = None
        self._result: T | None = None
        self._error: BaseException | None = None
        self._ready = threading.Event()
        self._cancel_requested = False
        self.thread = threading.Thread(target=self._run, name=f"netns-{ns}", daemon=True)

    def _run(self) -> None:
        try:
            enter_netns(self.ns)
            self._result = asyncio.run(self._wrapper())
        except BaseException as exc:  # handed to the caller through result()
            self._error = exc
        finally:
            self._ready.set()

    async def _wrapper(self) -> T:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()  # type: ignore[assignment]
        self._ready.set()
        if self._cancel_requested:
            raise asyncio.CancelledError
        return await self._main()

    def start(self) -> None:
        self.thread.start()
        self._ready.wait()

    def cancel(self) -> None:
        self._cancel_requested = True
        if self._loop is not None and self._task is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop finished meanwhile
                self._loop.call_soon_threadsafe(self._task.cancel)

    def join(self, timeout: float | None = None) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def result(self) -> T:
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]
