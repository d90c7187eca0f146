"""The report's "What was run" section: the slices, link, UE groups, services (with the profile
numbers they ran with) and clients of a run, from its manifest and cell files alone.

Each cell's scenario and testbed are the manifest's with the cell's matrix values applied (the
same expansion the run made); a number the matrix changes reads "per cell" in its table and
has a column of its own in the table of cells. Subscriber keys are masked in the manifest and
never printed here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from testbed.config import TestbedSpec
from testbed.config.fiveqi import DEFAULT_FIVE_QI, FIVE_QI
from testbed.config.secrets import unredact_scenario, unredact_testbed
from testbed.profiles import default_profiles
from testbed.report.document import Section, TableData
from testbed.scenario.matrix import expand
from testbed.scenario.spec import Scenario
from testbed.sim.measure import DEFAULT_MEASURE, MEASURES

PER_CELL = "per\u00a0cell"  # one word to a browser: a narrow column does not split it
# a table of the section: (caption, column titles, its rows for one cell's scenario and testbed;
# a row's first entry names it)
Rows = Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], list[list[str]]]


def what_was_run(manifest: dict[str, Any], cells: list[dict[str, Any]]) -> Section:
    """The section for a run: `cells` are the cells' cell.json contents (any repetition)."""
    scn, testbed = manifest["scenario"], manifest["testbed"]
    profiles, note = _profiles(manifest, cells)
    resolved = _cells(manifest, cells)
    sim = scn.get("engine") == "sim"
    models = any(x.get("model") for _, s, _ in resolved for x in s.get("services") or [])
    sec = Section("What was run")
    tables: list[tuple[str, list[str], Rows]] = [
        ("", ["engine", "resource units", "scaler period s", "seconds per cell", "measured"],
         _setup)]
    if not sim:
        tables += _network_tables(resolved)
    tables += [
        ("Services: the scenario's replicas and policy, the profile's numbers (per replica)",
         ["service", "policy", *(["model"] if models else []), "replicas", "units", "capacity",
          "queue limit", "proc. time ms", "start-up s", *(["rate limit"] if sim else []),
          "SLO ms", "numbers from"],
         lambda s, t, c: _services(s, profiles, sim, models)),
        ("Clients", ["client", "load", "ratio", "shift h", "start s"], _clients),
    ]
    if scn.get("cross_traffic") and not sim:
        tables.append(("Cross-traffic (iperf3)", ["slice (direction)", "flows"], _iperf))
    varying: list[tuple[str, list[str]]] = []
    for caption, header, rows in tables:
        table, changed = _per_cell(header, rows, resolved, scn, testbed)
        if table.rows:
            table.caption = caption
            sec.tables.append(table)
            varying += changed
    if sim:
        sec.paragraphs.append("On the simulator a replica's start-up is drawn in whole seconds "
                              "from its range, and a replica admits at most its rate limit's "
                              "requests per window (the published simulator's choices; the "
                              "testbed's replicas have neither).")
    if note:
        sec.paragraphs.append(note)
    if varying:
        sec.tables.append(TableData(
            ["cell", *(name for name, _ in varying)],
            [[label, *(values[i] for _, values in varying)]
             for i, (label, _, _) in enumerate(resolved)],
            "What the matrix changes, per cell"))
    return sec


def _network_tables(resolved: list[tuple[str, dict[str, Any], dict[str, Any]]],
                    ) -> list[tuple[str, list[str], Rows]]:
    """The testbed's tables of its network: the link, the slices, the UE groups and (where a cell
    has them) the link's conditions."""
    off = any(not (t.get("link") or {}).get("slicing", True) for _, _, t in resolved)
    tables: list[tuple[str, list[str], Rows]] = [
        ("Link (the bottleneck between the UPF and the data network)" + (
            "; with slicing off every packet shares one class: the slices' guarantees and "
            "ceilings do not apply" if off else ""),
         ["link", "capacity Mbit/s", "uplink Mbit/s", "downlink Mbit/s", "slicing",
          "delay ms", "queues"], _link),
        ("Slices", ["slice", "S-NSSAI (sst/sd)", "DNN", "subnet", "guaranteed Mbit/s",
                    "ceiling Mbit/s"], _slices),
        ("UE groups: the QoS each UE of the group has (an AMBR below the link, or a 5QI other "
         "than 9, is enforced by a leaf of the UE's own in its slice's class)",
         ["UE group", "slice", "UEs", "AMBR up Mbit/s", "AMBR down Mbit/s", "5QI (priority)"],
         _ue_groups),
    ]
    if any((t.get("link") or {}).get("conditions") for _, _, t in resolved):
        tables.append(("Link conditions in force: each trace's steps (scenario seconds from "
                       "the cell's start; a blank keeps the value before)",
                       ["applies to", "trace", "steps"], _conditions))
    return tables


def _setup(scn: dict[str, Any], tb: dict[str, Any], _: dict[str, Any]) -> list[list[str]]:
    engine = ("the simulator (no network: no slices, link or UEs)" if scn.get("engine") == "sim"
              else "the testbed")
    return [[engine, _n(scn.get("total_units")), _n(scn.get("scaler_period_s")),
             _n(scn.get("duration_s")), _measured(scn)]]


def _measured(scn: dict[str, Any]) -> str:
    """How the run read its periods (its `measure:`)."""
    name = scn.get("measure") or DEFAULT_MEASURE
    way = MEASURES.get(name)
    return way.title if way is not None else str(name)


def _profiles(manifest: dict[str, Any], cells: list[dict[str, Any]]
              ) -> tuple[dict[str, dict[str, Any]], str]:
    """The services' profiles as the run recorded them, and a note where it did not."""
    if isinstance(manifest.get("service_profiles"), dict):
        return manifest["service_profiles"], ""
    for info in cells:  # testbed cells record their profiles (without their sources)
        if isinstance(info.get("profiles"), dict):
            return info["profiles"], ""
    own = manifest["scenario"].get("service_profiles")
    note = ("The run did not record its service profiles: the numbers are this version's "
            "packaged profiles" + (f", not those of its file `{own}`" if own else "") + ".")
    return {n: p.model_dump(mode="json") for n, p in default_profiles().items()}, note


def _cells(manifest: dict[str, Any], cells: list[dict[str, Any]]
           ) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(label, scenario, testbed) of each cell, in the run's order: the manifest's with the
    cell's matrix values applied; the manifest's alone where that cannot be redone."""
    scn, testbed = manifest["scenario"], manifest["testbed"]
    labels = {}
    for info in cells:
        labels.setdefault(info.get("slug"), info.get("label") or info.get("slug"))
    try:
        expanded = expand(Scenario.model_validate(unredact_scenario(scn)),
                          TestbedSpec.model_validate(unredact_testbed(testbed)))
    except (ValidationError, ValueError, TypeError, AssertionError):
        expanded = []
    if expanded and {c.slug for c in expanded} >= set(labels):
        return [(c.label, c.scenario.model_dump(mode="json"), c.testbed.model_dump(mode="json"))
                for c in expanded if c.slug in labels or not labels]
    return [(label, scn, testbed) for label in labels.values()] or [("base", scn, testbed)]


def _per_cell(header: list[str], rows: Rows, resolved: list[tuple[str, dict, dict]],
              scn: dict[str, Any], testbed: dict[str, Any]
              ) -> tuple[TableData, list[tuple[str, list[str]]]]:
    """The table as the manifest has it, a value that differs between the cells that have its row
    read as PER_CELL; and the cells' values of each ('<row> <column>', or the column alone in a
    one-row table), the same column of rows with the same values given once."""
    per_cell = [{r[0]: r for r in rows(s, t, scn)} for _, s, t in resolved]
    base = {r[0]: r for r in rows(scn, testbed, scn)}
    names = list(dict.fromkeys([*base, *(n for c in per_cell for n in c)]))
    out, varying = [], {}
    for name in names:
        row = list(base.get(name) or next(c[name] for c in per_cell if name in c))
        for j in range(1, len(header)):
            values = [c[name][j] if name in c else "–" for c in per_cell]
            if len({c[name][j] for c in per_cell if name in c}) > 1:
                row[j] = PER_CELL
                varying.setdefault((header[j], tuple(values)), []).append(name)
        out.append(row)
    return TableData(header, out), [
        (column if len(names) == 1 else f"{', '.join(which)} {column}", list(values))
        for (column, values), which in varying.items()]


def _link(scn: dict[str, Any], tb: dict[str, Any], _: dict[str, Any]) -> list[list[str]]:
    link = tb.get("link") or {}
    cap = link.get("capacity_mbit")
    queues = (f"{link['flow_queues']} flow queues per class" if link.get("flow_queues")
              else f"one FIFO of {link.get('queue_packets')} packets per class")
    return [["bottleneck", _n(cap), _n(link.get("uplink_mbit") or cap),
             _n(link.get("downlink_mbit") or cap), "on" if link.get("slicing", True) else "off",
             _n(link.get("delay_ms")), queues]]


def _slices(scn: dict[str, Any], tb: dict[str, Any], _: dict[str, Any]) -> list[list[str]]:
    return [[s["name"], f"{s['sst']}/{s['sd']}" if s.get("sd") else f"{s['sst']} (no SD)",
             str(s.get("dnn", "")), str(s.get("subnet", "")), _n(s.get("guaranteed_mbit")),
             _n(s["ceiling_mbit"]) if s.get("ceiling_mbit") else "none: the link's rate"]
            for s in tb.get("slices") or []]


def _ue_groups(scn: dict[str, Any], tb: dict[str, Any], _: dict[str, Any]) -> list[list[str]]:
    out = []
    for g in tb.get("ue_groups") or []:
        qi = g.get("five_qi", DEFAULT_FIVE_QI)
        level = FIVE_QI.get(qi, (None, None))[1]
        out.append([g["name"], str(g.get("slice")), str(g.get("count")),
                    _n(g.get("ambr_uplink_mbit")), _n(g.get("ambr_downlink_mbit")),
                    f"{qi} ({level})" if level is not None else str(qi)])
    return out


def _conditions(scn: dict[str, Any], tb: dict[str, Any], _: dict[str, Any]) -> list[list[str]]:
    out = []
    for c in (tb.get("link") or {}).get("conditions") or []:
        target = (f"slice {c['slice']}" if c.get("slice") else
                  f"UE group {c['ue_group']}" if c.get("ue_group") else "the link")
        steps = "; ".join(
            f"{_n(s.get('time_s'))} s: " + ", ".join(
                f"{label.format(_n(s[k]))}" for k, label in (
                    ("capacity_mbit", "{} Mbit/s"), ("loss", "loss {}"), ("delay_ms", "{} ms"))
                if s.get(k) is not None)
            for s in c.get("steps") or [])
        out.append([target, Path(str(c.get("trace", ""))).name, steps])
    return out


def _services(scn: dict[str, Any], profiles: dict[str, dict[str, Any]], sim: bool,
              models: bool) -> list[list[str]]:
    out = []
    for s in scn.get("services") or []:
        p = profiles.get(s["name"], {})
        lo, hi = p.get("proc_time_ms") or (None, None)
        first, last = p.get("startup_ms"), p.get("startup_max_ms")
        start = _n(_s(first))
        if sim and last is not None and first is not None and last > first:
            start = f"{start}–{_n(_s(last))}"  # the simulator draws whole seconds in between
        limit = (f"{p['rate_limit'][0]} / {_n(p['rate_limit'][1])} s" if p.get("rate_limit")
                 else "none")
        model = [Path(s["model"]).name if s.get("model") else "–"] if models else []
        out.append([s["name"], str(s.get("policy")), *model, str(s.get("replicas")),
                    _n(p.get("units")), _n(p.get("capacity")), _n(p.get("queue_limit")),
                    f"{_n(lo)}–{_n(hi)}", start, *([limit] if sim else []), _n(p.get("slo_ms")),
                    _origin(s["name"], p, scn)])
    return out


def _s(ms: float | None) -> float | None:
    return None if ms is None else round(ms / 1000, 3)


def _origin(name: str, profile: dict[str, Any], scn: dict[str, Any]) -> str:
    """Where the numbers come from: the packaged profile, or the fields the scenario's own
    profile file gives."""
    own = scn.get("service_profiles")
    sources = profile.get("sources") or {}
    given = [k for k in profile  # in the profile's order of fields
             if isinstance(sources.get(k), str) and sources[k].startswith("given in ")]
    if own and given:
        return f"`{Path(own).name}`: " + ", ".join(given)
    if own and name not in default_profiles():
        return f"`{Path(own).name}`"
    return "packaged"


def _clients(scn: dict[str, Any], tb: dict[str, Any], _: dict[str, Any]) -> list[list[str]]:
    out, seen = [], {}
    for c in scn.get("clients") or []:
        name = c["service"] + (f" from {c['ue_group']}" if c.get("ue_group") else "")
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name += f" #{seen[name]}"
        if c.get("rate") is not None:
            load, ratio = f"{_n(c['rate'])} req/s, constant", "–"
        else:
            load, ratio = f"trace `{c.get('trace')}`", _n(c.get("ratio"))
        out.append([name, load, ratio, _n(c.get("shift_hours")), _n(c.get("start_s"))])
    return out


def _iperf(scn: dict[str, Any], tb: dict[str, Any], _: dict[str, Any]) -> list[list[str]]:
    return [[f"{x['slice']} ({x.get('direction')})", str(x.get("flows"))]
            for x in scn.get("cross_traffic") or []]


def _n(v: Any) -> str:
    """A number as a person writes it: 20 not 20.0, 0.15 as it is; – for none."""
    if v is None:
        return "–"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)
