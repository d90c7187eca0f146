"""The report's "The host during each cell" section: what the host did to each timed cell (the
hypervisor's steal, the other work's share of the CPUs, how long each process group waited for a
core) from its cell.json, and why a cell's figures are the machine's where they are."""

from __future__ import annotations

from typing import Any

from testbed.report.document import Section, TableData

GROUPS = ("clients", "runner", "replicas", "iperf3", "harness")  # replicas: every service's summed


def host_section(cells: list[dict[str, Any]]) -> Section | None:
    """The section for a run's cells (their cell.json), None when no cell was metered (the
    simulator, the lab, a kernel without schedstat)."""
    metered = [c for c in cells if (c.get("host") or {}).get("seconds")]
    if not metered:
        return None
    rows = []
    for c in metered:
        h = c["host"]
        waits = _by_group(h.get("wait_ms") or {})
        rows.append([f"{c.get('label', c.get('slug', '?'))} rep {c.get('rep', 0)}",
                     str(c.get("status", "")), f"{h['seconds']:.0f}",
                     f"{100 * h.get('steal_share', 0.0):.1f}", f"{100 * h.get('others_share', 0.0):.0f}",
                     f"{100 * h.get('yielding_share', 0.0):.0f}",
                     f"{100 * h.get('busy_share', 0.0):.0f}",
                     *(f"{waits[g] / 1000:.2f}" if g in waits else "–" for g in GROUPS)])
    sec = Section("The host during each cell", paragraphs=[
        "Over each cell's measured window (testbed.metrics.host, from /proc): the share of all "
        "CPUs' time the hypervisor stole, the share other work held (neither the harness's "
        "processes nor its packets) and how much of it ran at a lower priority than the harness "
        "(a positive nice: it only takes what the harness leaves idle), how busy the host was, "
        "and how many seconds each process group waited for a core. A cell whose clients fell "
        "behind, or whose SLO violations fell in seconds its replicas were starved while other "
        "work at the harness's priority or above held the CPUs, is the machine's (status behind: "
        "MACHINE BEHIND), never the product's result."],
        tables=[TableData(["cell", "status", "seconds", "steal %", "other work %",
                           "of it lower priority %", "busy %",
                           *(f"{g} waited s" for g in GROUPS)], rows)])
    sec.bullets = [line for c in metered for line in (c.get("behind") or {}).values()]
    return sec


def _by_group(wait_ms: dict[str, float]) -> dict[str, float]:
    """The waits by GROUPS: each service's replicas ("replicas:imgcls") summed as "replicas"."""
    out: dict[str, float] = {}
    for group, ms in wait_ms.items():
        key = "replicas" if group.startswith("replicas:") else group
        out[key] = out.get(key, 0.0) + ms
    return out
