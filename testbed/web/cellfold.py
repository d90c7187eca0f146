"""One repetition of one cell as the live page draws it: its files folded, as they grow, into time
bins on the scenario's axis (per service, slice and UE group) and a tally of its figures so far.

The axis is the one samples.jsonl and decisions.jsonl use: scenario seconds from the measured
window's start (negative in a warm-up). A wall time `w` sits at `clock.scenario(w - load_started)
- warmup_s`, from the cell.json the cell writes as its load begins. Requests count in the bin
their answer came in (records are written then), at their scenario latency
(`testbed.clock.ScenarioClock.scenario_ms_of`); in-flight is the time mean of requests between send
and answer over the bin. Until the cell ends its figures are a tally of the measured requests so
far, by the same definitions as `testbed.scenario.results.service_row`; once it has ended, its
rows are `cell_rows`' own (what results.json records).
"""

from __future__ import annotations

import math
import time
from array import array
from pathlib import Path
from typing import Any

from testbed.clock import REAL_TIME, ScenarioClock
from testbed.load.records import schedule_lag_ms
from testbed.scenario.results import SLO_MS, cell_rows
from testbed.web.bins import MAX_BINS, LinkBins, ServiceBins, Tally, bin_width
from testbed.web.labels import cell_key, masked_label
from testbed.web.tail import JsonlTail, read_json
from testbed.web.tally import tally_rows

ENDED = ("ok", "failed", "interrupted", "planned")  # a cell.json status once the cell is over
SERIES = ("rate", "errors", "viol", "p50", "p95", "p99", "ready", "desired", "inflight")
TALLY_EVERY_S = 1.0  # a live tally's percentiles: at most this often (more while they cost more)
FEED_BUDGET_S = 0.25  # per poll and cell: the rest of a long file waits for the next poll


class CellFold:
    """The files of one cell repetition's directory, folded as they grow (`poll`).

        fold = CellFold(run_dir / "cells" / "00-base" / "rep-0")
        fold.poll(); fold.snapshot()   # everything so far;  fold.delta(): what changed since
    """

    def __init__(self, path: Path):
        self.path = path
        self.key = cell_key(path.parent.name, int(path.name.removeprefix("rep-")))
        self.info: dict[str, Any] = {}
        self.clock: ScenarioClock = REAL_TIME  # the cell's, from its cell.json
        self._info_stamp: tuple[int, int] | None = None
        self._tails: dict[str, JsonlTail] = {}
        self._pending: dict[str, list[dict[str, Any]]] = {}  # rows before the load's start is known
        self.width = 1.0
        self.net_width = 1.0
        self.t0 = 0.0
        self.n = 0  # bins in use
        self.net_n = 0  # the links' bins in use (net_width each)
        self.services: dict[str, ServiceBins] = {}
        self.tally: dict[str, Tally] = {}
        self.links: dict[str, LinkBins] = {}  # "slice|ai|uplink", "group|be|downlink"
        self._drops_before: dict[tuple[Any, ...], int] = {}
        self._group_t: dict[str, float] = {}  # a group's last sample time (its UEs' rows share it)
        self.decisions: list[dict[str, Any]] = []
        self.replica_events: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.conditions: list[dict[str, Any]] = []
        self.rows: list[dict[str, Any]] | None = None  # cell_rows' once the cell has ended
        self._tally_view: dict[str, dict[str, Any]] = {}
        self._tally_at = 0.0
        self._tally_every = TALLY_EVERY_S
        self._tally_dirty = False
        self.last_growth = time.time()
        self._deadline = 0.0
        # what the last delta carried: bins from this one on are re-sent, lists from these lengths
        self._dirty_from: int | None = 0
        self._net_dirty_from: int | None = 0
        self._sent = {"decisions": 0, "replica_events": 0, "problems": 0, "conditions": 0}
        self._changed = True

    def rebase(self, path: Path) -> None:
        """The same cell at another path (its run directory renamed)."""
        self.path = path
        for name, tail in self._tails.items():
            tail.path = path / name

    def compact(self) -> None:
        """Free what only a running cell needs (each bin's latencies, the tally's), once its rows
        are cell_rows' and its bins settled."""
        if self.rows is None:
            return
        for b in self.services.values():
            b.lat = [array("d") for _ in b.lat]
        for t in self.tally.values():
            t.ok_ms, t.lags_ms = array("d"), array("d")

    # -- the cell's own record ------------------------------------------------------------------
    @property
    def status(self) -> str:
        """cell.json's status ("running" until it ends)."""
        return str(self.info.get("status", "running"))

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    @property
    def warmup_s(self) -> float:
        return float(self.info.get("warmup_s") or 0.0)

    @property
    def span_s(self) -> float:
        """The cell's planned scenario seconds: its warm-up and its measured window."""
        return self.warmup_s + float(self.info.get("duration_s") or 0.0)

    @property
    def load_started(self) -> float | None:
        v = self.info.get("load_started")
        return float(v) if isinstance(v, int | float) else None

    def axis(self, wall: float) -> float:
        """A wall time on the cell's scenario axis (load_started known)."""
        assert self.load_started is not None
        return self.clock.scenario(wall - self.load_started) - self.warmup_s

    def slo_ms(self, service: str) -> float:
        slo = (self.info.get("slo_ms") or {}).get(service)
        return float(slo) if slo is not None else SLO_MS.get(service, 1000.0)

    def _read_info(self) -> bool:
        p = self.path / "cell.json"
        try:
            st = p.stat()
        except OSError:
            return False
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._info_stamp:
            return False
        info = read_json(p)
        if info is None:
            return False  # replaced as we read it: the next poll reads it whole
        had_start = self.load_started is not None
        self.info, self._info_stamp = info, stamp
        self.clock = ScenarioClock.of_cell(info)
        if not had_start:
            self.width = bin_width(self.span_s)
            self.t0 = -self.warmup_s
            # the HTB counters are read every wall second: a link's bin holds at least one read
            self.net_width = self.width * max(1, math.ceil(self.clock.scenario(1.0) / self.width))
        for s in info.get("services", []):
            self.services.setdefault(s, ServiceBins())
            self.tally.setdefault(s, Tally())
        self._changed = True
        return True

    # -- folding --------------------------------------------------------------------------------
    def poll(self) -> bool:
        """Read what the cell's files gained; True when anything changed."""
        info_changed = self._read_info()
        if not self.info:
            return False
        self._deadline = time.monotonic() + FEED_BUDGET_S
        grew = False
        for name, fold in (("samples.jsonl", self._sample), ("decisions.jsonl", self._decision),
                           ("events.jsonl", self._event), ("net.jsonl", self._net),
                           ("conditions.jsonl", self._condition)):
            grew |= self._feed(name, fold)
        for f in sorted((self.path / "requests").glob("*.jsonl")):
            grew |= self._feed(f"requests/{f.name}", self._record)
        if grew:
            self.last_growth = time.time()
            self._changed = True
        for s in self.services.values():
            s.settle()
        if self.ended and self.rows is None and not self.behind:
            try:
                self.rows = cell_rows(self.path)
            except (OSError, ValueError, KeyError):
                self.rows = []
            self._changed = True
            self.compact()
        self._retally()
        return grew or info_changed or self._changed

    @property
    def behind(self) -> bool:
        """Whether a file holds more than has been folded (a long file read over several polls)."""
        return any(t.behind for t in self._tails.values())

    def _feed(self, name: str, fold: Any) -> bool:
        """Fold what file `name` gained: a read at a time (READ_LIMIT), until it is read or the
        poll's FEED_BUDGET_S is spent (a finished day's file goes over a few polls)."""
        tail = self._tails.get(name)
        if tail is None:
            tail = self._tails[name] = JsonlTail(self.path / name)
        grew = False
        while True:
            rows = tail.read()
            if self.load_started is None:  # no axis yet: kept until cell.json says when the load began
                if rows:
                    self._pending.setdefault(name, []).extend(rows)
                return bool(rows)  # the testbed is up: the run is not quiet
            rows = self._pending.pop(name, []) + rows
            for row in rows:
                try:
                    fold(row, name)
                except (KeyError, TypeError, ValueError):
                    continue  # a row of another shape (an older run's): left out
            grew |= bool(rows)
            if not rows or not tail.behind or time.monotonic() > self._deadline:
                return grew

    def _bin(self, t: float) -> int | None:
        """The bin of axis time `t`, None before the first (replicas starting) or far past the
        end; the bins in use grow to it."""
        i = math.floor((t - self.t0) / self.width)
        if i < 0 or i > 2 * MAX_BINS:
            return None
        if i >= self.n:
            self.n = i + 1
        return i

    def _net_bin(self, t: float) -> int | None:
        """The links' bin of axis time `t` (`_bin`'s, net_width wide)."""
        i = math.floor((t - self.t0) / self.net_width)
        if i < 0 or i > 2 * MAX_BINS:
            return None
        self.net_n = max(self.net_n, i + 1)
        return i

    def _touch_net(self, i: int) -> None:
        self._net_dirty_from = i if self._net_dirty_from is None else min(self._net_dirty_from, i)

    def _touch(self, i: int) -> None:
        self._dirty_from = i if self._dirty_from is None else min(self._dirty_from, i)

    def _record(self, r: dict[str, Any], name: str) -> None:
        service = r["service"]
        bins = self.services.setdefault(service, ServiceBins())
        sent = float(r["sent"])
        done_wall = sent + float(r["latency_ms"]) / 1000.0
        start, end = self.axis(sent), self.axis(done_wall)
        i = self._bin(end)
        ok = r.get("error") is None
        scn_ms = self.clock.scenario_ms_of(r)
        violated = (not ok) or scn_ms > self.slo_ms(service)
        if i is not None:
            bins.grow(self.n)
            bins.completed[i] += 1
            bins.errors[i] += not ok
            bins.violations[i] += violated
            if ok:
                bins.lat[i].append(scn_ms)
                bins.dirty.add(i)
            self._touch(i)
        if i is not None:  # the first request may leave a moment before the load's start
            first = max(0, math.floor((start - self.t0) / self.width))
            bins.grow(self.n)
            for k in range(first, min(i, first + 50) + 1):  # a request spans a few bins at most
                lo = self.t0 + k * self.width
                overlap = min(end, lo + self.width) - max(start, lo)
                if overlap > 0:
                    bins.busy_s[k] += overlap
            self._touch(first)
        warm = (self.info.get("warmup_requests") or {}).get(name.removeprefix("requests/"), 0)
        if int(r.get("seq", 0)) <= warm:
            return  # the warm-up's: on the axis, not in the figures
        t = self.tally.setdefault(service, Tally())
        t.requests += 1
        t.errors += not ok
        t.violations += violated
        if ok:
            t.latency_sum_ms += scn_ms
            t.ok_ms.append(scn_ms)
        lag = schedule_lag_ms(r)
        if lag is not None:
            t.lags_ms.append(self.clock.scenario(lag))
        self._tally_dirty = True

    def _sample(self, s: dict[str, Any], _name: str) -> None:
        service = s["service"]
        bins = self.services.setdefault(service, ServiceBins())
        i = self._bin(float(s["t"]))
        if i is not None:
            bins.grow(self.n)
            bins.ready[i], bins.desired[i] = int(s["ready"]), int(s["desired"])
            self._touch(i)
        if not s.get("warmup"):
            t = self.tally.setdefault(service, Tally())
            t.ready_sum += int(s["ready"])
            t.samples += 1
            self._tally_dirty = True

    def _decision(self, d: dict[str, Any], _name: str) -> None:
        self.decisions.append({
            "t": round(float(d["t"]), 3), "service": d["service"], "policy": d.get("policy"),
            "proposed": d.get("proposed"), "applied": d.get("applied"),
            "before": d.get("replicas_before"), "after": d.get("replicas_after"),
            "reward": d.get("reward"), "warmup": bool(d.get("warmup"))})

    def _event(self, e: dict[str, Any], _name: str) -> None:
        if e.get("kind") == "problem":
            self.problems.append(str(e.get("detail", "")))
            return
        if e.get("replica") and isinstance(e.get("t"), int | float):
            self.replica_events.append({"t": round(self.axis(float(e["t"])), 3),
                                        "service": e.get("service"), "replica": e["replica"],
                                        "kind": e.get("kind")})

    def _net(self, row: dict[str, Any], _name: str) -> None:
        t = float(row["t"])
        i = self._net_bin(self.axis(t))
        direction = row["direction"]
        ue = row.get("ue")
        who = (direction, row.get("slice"), ue)
        drops = int(row.get("drops") or 0)
        dropped = max(0, drops - self._drops_before.get(who, drops))
        self._drops_before[who] = drops
        if i is None:
            return
        if ue is None:
            key = f"slice|{row.get('slice')}|{direction}"
            new_sample = True
        else:
            key = f"group|{row.get('group')}|{direction}"
            new_sample = self._group_t.get(key) != t  # the UEs of one sample add up
            self._group_t[key] = t
        link = self.links.setdefault(key, LinkBins())
        link.grow(self.net_n)
        if row.get("rate_mbit") is not None:
            link.rate_sum[i] += float(row["rate_mbit"])
            link.rate_n[i] += new_sample
        link.drops[i] += dropped
        self._touch_net(i)

    def _condition(self, c: dict[str, Any], _name: str) -> None:
        self.conditions.append({"t": round(self.axis(float(c["t"])), 3), "time_s": c.get("time_s"),
                                "values": c.get("values", {}), "ok": c.get("ok", True)})

    # -- the figures ----------------------------------------------------------------------------
    def _retally(self) -> None:
        """The live tally's view, its percentiles at most every `_tally_every` seconds (ten times
        what they last cost, at least TALLY_EVERY_S)."""
        if not self._tally_dirty or time.monotonic() - self._tally_at < self._tally_every:
            return
        began = time.monotonic()
        view = tally_rows(self.tally, self.clock, self.slo_ms)
        self._tally_view = view
        self._tally_at = time.monotonic()
        self._tally_every = max(TALLY_EVERY_S, 10 * (self._tally_at - began))
        self._tally_dirty = False
        self._changed = True

    def summary(self) -> dict[str, Any]:
        """The cell's figures: `cell_rows`' once it has ended ("cell"), else the live tally."""
        if self.rows is not None:
            return {"source": "cell", "rows": self.rows}
        return {"source": "live", "rows": list(self._tally_view.values())}

    def behind_schedule(self) -> dict[str, float]:
        """Per service, how late its clients are beyond the cell's bound (scenario ms): cell.json's
        once it has ended, the tally's so far before."""
        if self.ended:
            return dict(self.info.get("behind_schedule") or {})
        return {s: v["behind_ms"] for s, v in self._tally_view.items() if v.get("behind_ms")}

    def _series(self, start: int, net_start: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, b in self.services.items():
            b.grow(self.n)
            out[name] = b.series(start, self.n, self.width)
        links: dict[str, Any] = {}
        wall_s = self.clock.wall(self.net_width)
        for key, link in self.links.items():
            link.grow(self.net_n)
            links[key] = link.series(net_start, self.net_n, wall_s)
        return {"services": out, "links": links, "net_from": net_start}

    def head(self) -> dict[str, Any]:
        """What the cell is, where it stands and its figures (everything but the series)."""
        info = self.info
        return {
            "key": self.key, "label": masked_label(info.get("params") or {}),
            "rep": info.get("rep", 0), "status": self.status,
            "phase": self.phase(), "time_scale": self.clock.scale, "warmup_s": self.warmup_s,
            "duration_s": info.get("duration_s"), "t0": self.t0, "width": self.width,
            "net_width": self.net_width,
            "started": info.get("started"), "ended": info.get("ended"),
            "load_started": self.load_started, "now_t": self.now_t(),
            "services": info.get("services", sorted(self.services)),
            "slo_ms": {s: self.slo_ms(s) for s in self.services},
            "summary": self.summary(), "behind": self.behind_schedule(),
            "failures": info.get("failures", []), "last_growth": self.last_growth}

    def phase(self) -> str:
        """starting replicas, warm-up, running, stopping, or the cell's ended status."""
        if self.ended:
            return self.status
        if self.load_started is None:
            return "starting replicas"
        t = self.now_t()
        if t is not None and t < 0:
            return "warm-up"
        return "running" if t is None or t < float(self.info.get("duration_s") or 0) else "stopping"

    def now_t(self) -> float | None:
        """Where the cell stands on its axis: now while it runs, its end once it has ended."""
        if self.load_started is None:
            return None
        end = self.info.get("ended") if self.ended else None
        return round(min(self.axis(float(end) if end else time.time()),
                         float(self.info.get("duration_s") or 0.0) + self.clock.scenario(5.0)), 3)

    def snapshot(self) -> dict[str, Any]:
        """Everything the cell holds so far."""
        return {**self.head(), "from": 0, **self._series(0, 0),
                **{name: getattr(self, name) for name in self._sent}}

    def delta(self, force: bool = False) -> dict[str, Any] | None:
        """What changed since the last delta (bins from `from` on, each list's new items from its
        `<name>_from`), or None; with `force`, the cell's head at least (its clock moves on)."""
        if not (force or self._changed or self._dirty_from is not None
                or self._net_dirty_from is not None):
            return None
        start = self.n if self._dirty_from is None else min(self._dirty_from, self.n)
        net_start = (self.net_n if self._net_dirty_from is None
                     else min(self._net_dirty_from, self.net_n))
        out = {**self.head(), "from": start, **self._series(start, net_start)}
        for name, sent in self._sent.items():
            items = getattr(self, name)
            out[name] = items[sent:]
            out[f"{name}_from"] = sent
            self._sent[name] = len(items)
        self._dirty_from = self._net_dirty_from = None
        self._changed = False
        return out

