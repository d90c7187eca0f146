"""One table of `testbed sim tables`: each policy run at the table's setup, printed beside the
paper's figures (or as JSON rows) and judged as `testbed reproduce` judges it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from testbed.cli import console
from testbed.cli.sim_inputs import ChosenTraces, default_ratio
from testbed.profiles import paper

if TYPE_CHECKING:
    from testbed.profiles import ServiceProfile
    from testbed.profiles.paper import PaperResult
    from testbed.reproduce.tables import Cell
    from testbed.sim.cluster import SimOptions
    from testbed.train.evaluate import ServiceResult
    from testbed.train.oracle import OracleResult


@dataclass(frozen=True)
class TableSetup:
    """What every table of one `sim tables` shares."""

    traces: ChosenTraces
    profiles: dict[str, ServiceProfile]
    seed: int
    with_oracle: bool
    as_json: bool
    paper: bool  # the paper's three on the test day: judged beside the paper
    options: SimOptions | None = None  # the simulator's options, read the --measure way
    measure: str = "harness"


def sim_table(key: str, runs: dict[str, dict], setup: TableSetup) -> str | None:
    """One table of `sim tables`: its JSON rows, or the table beside the paper and its verdict
    (returned; None with --json, which judges nothing, or off the paper's setup)."""
    # the verdicts: the same judge as `testbed reproduce`
    from testbed.reproduce.tables import judge_sim_cell
    from testbed.train.evaluate import evaluate
    from testbed.train.oracle import shared_pool_oracles

    spec = paper.PAPER_TABLES[key]
    services = list(setup.profiles)
    ratios = {s: spec.ratios.get(s, default_ratio(s)) for s in services}
    traces, profiles, seed = setup.traces.traces, setup.profiles, setup.seed
    title = spec.name if setup.paper else f"{setup.traces.label()} ({spec.name}'s units and ratios)"
    if setup.measure != "harness":
        title += f", measure: {setup.measure}"
    judged: list[Cell] = []
    bounds: dict[str, OracleResult] = {}
    if setup.with_oracle:
        with console.status(f"{title}: oracle bound"):
            bounds = shared_pool_oracles(
                profiles, traces, ratios, total_units=spec.total_units, seed=seed
            )
    out = _paper_table_grid(title, spec.total_units, ratios, bounds, setup.paper)
    for name, policies in runs.items():
        with console.status(f"{title}: {name}"):
            ours = evaluate(
                policies, traces, ratios, total_units=spec.total_units, seed=seed, profiles=profiles,
                **({"options": setup.options} if setup.options is not None else {}))
        for s in services:
            if not setup.paper:
                if setup.as_json:
                    typer.echo(json.dumps(_own_json_row(key, name, ours[s], traces[s].name,
                                                        bounds.get(s))))
                else:
                    _add_own_rows(out, s, name, ours[s], bounds)
                continue
            theirs = spec.results[name][s]
            if setup.as_json:
                typer.echo(json.dumps(_paper_json_row(key, name, ours[s], theirs, bounds.get(s))))
                continue
            # the judge `testbed reproduce` applies to the same cell (docs/tolerances.md)
            cell = judge_sim_cell(key, paper.harness_policy(name), s, {
                "slo_violation_rate": ours[s].slo_violation_rate,
                "instances": ours[s].instances, "proc_time_s": ours[s].proc_time,
                "reward": ours[s].reward})
            judged.append(cell)
            _add_paper_rows(out, s, name, ours[s], theirs, cell, bounds)
    if setup.as_json:
        return None
    console.print(out)
    if not setup.paper:
        console.print(f"{title}: not the paper's setup ({setup.traces.label()}, "
                      f"{', '.join(services)}), so no comparison with {spec.name}",
                      highlight=False, markup=False)
        return None
    return _print_table_verdict(key, judged, bounds)


def _paper_table_grid(title: str, units: int, ratios: dict[str, float],
                      bounds: dict[str, OracleResult], beside_paper: bool) -> Table:
    """The empty table for one paper table (or its setup on other traces or services), with the
    oracle's rows when there is a bound."""
    out = Table(
        title=f"{title}: {units} units shared by {len(ratios)} services, ratios "
        + ", ".join(f"{s} {r:g}" for s, r in ratios.items())
    )
    columns = ["service", "policy", "metric", "ours"]
    columns += ["paper", "diff"] if beside_paper else []
    columns += ["gap to oracle"] if bounds else []
    for col in [*columns, *(["verdict"] if beside_paper else [])]:
        out.add_column(col, justify="right")
    for s, b in bounds.items():
        out.add_row(s, "oracle", "reward", f"{b.reward:.4f}",
                    *(["-", "-", "-", ""] if beside_paper else ["-"]))
    return out


def _own_json_row(key: str, name: str, ours: ServiceResult, trace: str,
                  bound: OracleResult | None) -> dict:
    """One policy on one service at a table's setup off the paper's: named by its trace."""
    row = {"table_setup": key, "trace": trace, **ours.as_json(), "policy": name}
    if bound is not None:
        row["oracle_reward"] = bound.reward
    return row


def _add_own_rows(out: Table, service: str, name: str, ours: ServiceResult,
                  bounds: dict[str, OracleResult]) -> None:
    """One row per metric, ours only (and the gap to the bound)."""
    for metric, mine in (("SLO violation", ours.slo_violation_rate), ("instances", ours.instances),
                         ("proc time (s)", ours.proc_time), ("reward", ours.reward)):
        gap = ([f"{mine - bounds[service].reward:+.4f}" if metric == "reward" else ""]
               if bounds else [])
        out.add_row(service, name, metric, f"{mine:.4f}", *gap)


def _paper_json_row(
    key: str, name: str, ours: ServiceResult, theirs: PaperResult, bound: OracleResult | None
) -> dict:
    """One policy on one service of a table, beside the paper's cell, as `--json` prints it."""
    row = {"table": key, **ours.as_json(), "policy": name}
    row["paper"] = asdict(theirs)
    row["reward_diff"] = (ours.reward - theirs.reward) / abs(theirs.reward)
    if bound is not None:
        row["oracle_reward"] = bound.reward
    return row


def _add_paper_rows(
    out: Table, service: str, name: str, ours: ServiceResult, theirs: PaperResult, cell: Cell,
    bounds: dict[str, OracleResult],
) -> None:
    """One row per metric: ours, the paper's, the difference, the gap and the reward's verdict."""
    metrics = (
        ("SLO violation", ours.slo_violation_rate, theirs.slo_violation_rate),
        ("instances", ours.instances, theirs.instances),
        ("proc time (s)", ours.proc_time, theirs.proc_time_s),
        ("reward", ours.reward, theirs.reward),
    )
    for metric, mine, ref in metrics:
        diff = f"{(mine - ref) / abs(ref):+.1%}" if ref else "-"
        gap = ([f"{mine - bounds[service].reward:+.4f}" if metric == "reward" else ""]
               if bounds else [])
        verdict = ("" if metric != "reward" else
                   "[green]PASS[/]" if cell.passed else f"[red]FAIL[/] {cell.why}")
        out.add_row(service, name, metric, f"{mine:.4f}", f"{ref:.4f}", diff, *gap, verdict)


def _print_table_verdict(key: str, judged: list[Cell], bounds: dict[str, OracleResult]) -> str:
    """The table's verdict from its judged cells (and the bound), printed with what failed."""
    from testbed.reproduce.tables import judge_sim_table  # the same judge as `testbed reproduce`

    name = paper.PAPER_TABLES[key].name
    result = judge_sim_table(key, judged, {s: b.reward for s, b in bounds.items()})
    failed = [c.text for c in result.checks if not c.passed and not c.decided_by]
    console.print(f"{name}: {result.verdict}" + (
        f" ({'; '.join(failed)})" if failed else "") + (
        "" if bounds else " (without the oracle bound: --oracle adds its checks)"),
        highlight=False, markup=False)
    return result.verdict
