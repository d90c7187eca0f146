"""Whether a timed cell's figures are the machine's rather than the product's: its replicas starved
of a core in the seconds that hold its SLO violations, while work other than the harness's (the
hypervisor's steal, a process beside the run) held the CPUs at the harness's priority or above
(work at a lower priority only takes what the harness leaves idle); and the host's figures said in
one line beside every such verdict (testbed.metrics.host measures them)."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

from testbed.clock import ScenarioClock

# a second is the machine's when other work held at least this share of the CPUs in it: a
# process beside the run (about half of two cores), a hypervisor stealing a quarter; a host
# that only runs the harness leaves under 5 % to its daemons
OTHERS_SHARE = 0.15
# ... or, in a second the CPUs were full (busy at least SATURATED_BUSY), this smaller share: every
# slice other work takes then is taken from the harness (a run at 100 % beside a process that a
# higher-priority harness leaves 10-20 %, slicing-ci in the suite beside `while True: pass`)
SATURATED_BUSY = 0.97
SATURATED_OTHERS_SHARE = 0.08
MIN_STARVED_VIOLATIONS = 3  # fewer SLO violations than this are not put on the machine
STARVED_SHARE = 0.5  # ... nor when fewer than this share of the service's fall in starved seconds


def host_line(host: Mapping[str, Any], group: str | None = None) -> str:
    """The host's figures over a cell, as a verdict line ends: steal, the other work's share of
    the CPUs, and how long `group` waited for a core ("" without figures)."""
    if not host or not host.get("seconds"):
        return ""
    parts = [f"the hypervisor stole {100 * host.get('steal_share', 0.0):.1f} %",
             f"other work held {100 * host.get('others_share', 0.0):.0f} % of the CPUs"]
    yielding = host.get("yielding_share", 0.0)
    if yielding >= 0.005:
        parts[-1] += f" ({100 * yielding:.0f} % at a lower priority than the harness)"
    if group is not None and group in (host.get("wait_ms") or {}):
        parts.append(f"{group} waited {host['wait_ms'][group] / 1000:.2f} s for a core")
    return "host: " + ", ".join(parts)


def starved_seconds(seconds: Sequence[Mapping[str, Any]], service: str, proc_ms: float,
                    sent: Sequence[float] = ()) -> list[Mapping[str, Any]]:
    """The host seconds (host.jsonl rows) in which the service's replicas waited for a core
    longer than one request's processing time (`proc_ms`, wall) per request they were sent in
    it (`sent`: the requests' epoch send times, sorted; per replica where fewer came), while
    other work at the harness's priority or above (`_taking`) held at least OTHERS_SHARE of the
    CPUs (SATURATED_OTHERS_SHARE in a second the CPUs were full).

    Per request, because a replica's threads each wait a little at every wake-up: at time scale
    8, imgcls's replicas on an idle host waited 11-20 ms a second each against 9 ms of
    processing, spread over some 75 requests a second each (a fraction of a ms apiece)."""
    return [s for s in seconds if _others_held(s) and _wait_per_request(s, service, sent) > proc_ms]


def _wait_per_request(second: Mapping[str, Any], service: str, sent: Sequence[float]) -> float:
    """The ms the service's replicas waited for a core in a host second, per request sent in it
    (per replica where fewer came; 0 without replicas)."""
    group = f"replicas:{service}"
    n = (second.get("procs") or {}).get(group, 0)
    if not n:
        return 0.0
    lo, hi = second["t"] - second.get("seconds", 1.0), second["t"]
    arrived = bisect.bisect_right(sent, hi) - bisect.bisect_right(sent, lo)
    return (second.get("wait_ms") or {}).get(group, 0.0) / max(arrived, n)


def _taking(second: Mapping[str, Any]) -> float:
    """The share of the CPUs other work took from the harness in a host second: its "taking"
    (rows before it was measured: all of "others")."""
    return second.get("taking", second.get("others", 0.0))


def _others_held(second: Mapping[str, Any]) -> bool:
    others = _taking(second)
    return others >= OTHERS_SHARE or (second.get("busy", 0.0) >= SATURATED_BUSY
                                      and others >= SATURATED_OTHERS_SHARE)


def _in_flight_during(record: Mapping[str, Any], spans: list[tuple[float, float]]) -> bool:
    """Whether the request was in flight (sent, not yet answered) during one of `spans` (epoch)."""
    a = record["sent"]
    b = a + record["latency_ms"] / 1000.0
    return any(a < hi and b > lo for lo, hi in spans)


def starved_services(records: Mapping[str, list[dict[str, Any]]], seconds: Sequence[Mapping[str, Any]],
                     profiles: Mapping[str, Any], *, clock: ScenarioClock,
                     slo_ms: Mapping[str, float], since: float = 0.0) -> dict[str, str]:
    """Per service whose SLO violations the machine made, the line that says so: at least
    MIN_STARVED_VIOLATIONS of its violating requests, and STARVED_SHARE of them, were in flight
    during a starved second (`starved_seconds`).

    records: the cell's request records by service; seconds: its host.jsonl rows; profiles: the
    services' profiles (their processing time); clock: the cell's; slo_ms: each service's
    SLO; since: epoch seconds of the measured window's start."""
    out: dict[str, str] = {}
    for service, recs in records.items():
        profile = profiles.get(service)
        if profile is None:
            continue
        proc_ms = clock.wall(profile.mean_proc_time_ms)
        sent = sorted(r["sent"] for r in recs)
        starved = starved_seconds(seconds, service, proc_ms, sent)
        if not starved:
            continue
        slo = slo_ms.get(service, profile.slo_ms)
        late = [r for r in recs if r.get("scheduled", 0.0) >= since
                and (r.get("error") is not None or clock.scenario_ms_of(r) > slo)]
        spans = [(s["t"] - s.get("seconds", 1.0), s["t"]) for s in starved]
        hit = sum(1 for r in late if _in_flight_during(r, spans))
        if hit < MIN_STARVED_VIOLATIONS or hit < STARVED_SHARE * len(late):
            continue
        waited = max(_wait_per_request(s, service, sent) for s in starved)
        others = max(_taking(s) for s in starved)
        steal = max(s.get("steal", 0.0) for s in starved)
        out[service] = (
            f"{service}: its replicas were starved of a core in {len(starved)} second(s) "
            f"(up to {waited:.0f} ms waiting per request, against {proc_ms:.0f} ms of processing) "
            f"while other work at its priority or above held up to {100 * others:.0f} % of the CPUs "
            f"(steal up to {100 * steal:.1f} %); {hit} of its {len(late)} SLO violations fall in "
            "them: the machine's, not the product's")
    return out
