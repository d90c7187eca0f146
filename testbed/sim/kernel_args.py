"""The arrays and scalars the compiled kernels (testbed.sim.compiled) take, grouped: numba types
each group as a tuple, so a kernel takes a few named groups instead of 13-16 positional arrays."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class SubChunk(NamedTuple):
    """One sub-chunk's requests as `serve_round_robin` serves them: arrival times `a` (sorted) and
    service times `s`, and what it writes: each one's `finish` time (NaN-filled: refused and
    dropped stay NaN) and its `owner` instance."""

    a: np.ndarray
    s: np.ndarray
    finish: np.ndarray
    owner: np.ndarray


class Slots(NamedTuple):
    """The instances a sub-chunk is dealt to, one row per round-robin slot: `targets` (instance
    ids), the rate-limit window and count each carries from earlier calls (`prior_window`,
    `prior_count`, per column c: slot (rr + c) % m), and each one's queue: `pending` rows of
    finish times, `pending_len` of them valid."""

    targets: np.ndarray
    prior_window: np.ndarray
    prior_count: np.ndarray
    pending: np.ndarray
    pending_len: np.ndarray


class Rules(NamedTuple):
    """How `serve_round_robin` deals and admits: the round-robin pointer `rr`, the rate limit
    (`rate_limit` requests per `rate_window` seconds per instance; 0: none) and `limit`, the
    requests an instance holds."""

    rr: int
    rate_limit: int
    rate_window: float
    limit: int


class Frame(NamedTuple):
    """The windows `count_chunk` counts in: from `t0`, `steps` of `step` seconds; `slo` (s);
    `completion` (count a served request in the window it finishes in, else where it arrived);
    the busy samples' `origin` and count `n_samples`; `m` instances."""

    t0: float
    step: float
    steps: int
    slo: float
    completion: bool
    origin: float
    n_samples: int
    m: int


class Served(NamedTuple):
    """A chunk's requests as `count_chunk` counts them: arrival times `a`, `finish` times (NaN:
    dropped) and `owner` instances."""

    a: np.ndarray
    finish: np.ndarray
    owner: np.ndarray


class Carried(NamedTuple):
    """Served requests of earlier chunks not yet counted (completion counting): their `finish`
    times and `latency`."""

    finish: np.ndarray
    latency: np.ndarray


class Held(NamedTuple):
    """What the instances held when the chunk began (`instance` and `finish` per request, in
    flight from the first sample) and which instances the busy samples sum (`counted`; empty: one
    row per instance)."""

    instance: np.ndarray
    finish: np.ndarray
    counted: np.ndarray
