"""A wake-up at a given loop time, to the microsecond: a Linux timerfd watched by the event loop.

asyncio's own timers sleep in `epoll_wait`, whose timeout is in whole milliseconds rounded up
(`selectors.EpollSelector.select`), so a client that sleeps until each request's time sends it
0-1 ms late, 0.6 ms at the median (bench/loadgen.py). At time scale 16 that is 10 ms of scenario
time on every request, and most of the p99 lateness the cells are judged by (docs/pace.md). A
timerfd armed at the absolute CLOCK_MONOTONIC time (the clock of `loop.time()`) becomes readable
when it is due, and wakes the same `epoll_wait` then. Where there is no timerfd (not Linux), the
wait is asyncio's sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import itertools
import math
import os
import sys
import time
from types import TracebackType

CLOCK_MONOTONIC = 1
TFD_TIMER_ABSTIME = 1
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.restype = ctypes.c_int
        libc.timerfd_settime.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


class PreciseWake:
    """`await wake.until(when)` returns at loop time `when` (seconds of `loop.time()`), to the
    wake-up latency of the kernel rather than epoll's millisecond; any number of waits at once
    (one timerfd armed at the earliest). One per event loop; close it (or use `with`) to release
    the descriptor."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._due: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._armed: float | None = None
        self._fd = -1
        self._libc = _libc()
        self._spec = _Itimerspec()  # filled in place by each arming: no ctypes objects per wait
        self._spec_ref = ctypes.byref(self._spec)
        # loop.time() is time.monotonic(), CLOCK_MONOTONIC on Linux: the timerfd's clock
        if self._libc is not None and loop.time.__func__ is asyncio.BaseEventLoop.time \
                and time.get_clock_info("monotonic").implementation.startswith("clock_gettime"):
            fd = self._libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
            if fd >= 0:
                self._fd = fd
                loop.add_reader(fd, self._fired)

    @property
    def precise(self) -> bool:
        """Whether waits use the timerfd (False: asyncio's millisecond sleep)."""
        return self._fd >= 0

    def _arm(self, when: float) -> None:
        assert self._libc is not None
        sec = int(when)
        nsec = math.ceil((when - sec) * 1e9)  # up: a wake is never early
        if nsec >= 1_000_000_000:
            sec, nsec = sec + 1, nsec - 1_000_000_000
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = sec, nsec
        if self._libc.timerfd_settime(self._fd, TFD_TIMER_ABSTIME, self._spec_ref, None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime")
        self._armed = when

    def _fired(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            os.read(self._fd, 8)
        self._armed = None
        now = self._loop.time()
        while self._due and self._due[0][0] <= now:
            fut = heapq.heappop(self._due)[2]
            if not fut.done():
                fut.set_result(None)
        if self._due:
            self._arm(self._due[0][0])

    async def until(self, when: float) -> None:
        """Return at loop time `when` (at once if it has passed)."""
        if self._fd < 0:
            delay = when - self._loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            return
        if when <= self._loop.time():
            return
        fut: asyncio.Future[None] = self._loop.create_future()
        heapq.heappush(self._due, (when, next(self._order), fut))
        if self._armed is None or when < self._armed:
            self._arm(when)
        await fut  # cancelled: its entry is skipped when it falls due

    def close(self) -> None:
        """Stop watching the timerfd and close it (again: nothing)."""
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
        for _, _, fut in self._due:
            fut.cancel()
        self._due.clear()

    def __enter__(self) -> PreciseWake:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
