"""The end of `testbed run`: a table of what each cell measured and a one-line verdict."""

import json
from pathlib import Path

from rich.console import Console

from testbed.cli import scenario as cli_scenario
from testbed.judge.outcome import Outcome
from testbed.judge.verdict import run_verdict
from testbed.scenario.results import run_rows
from testbed.scenario.rundir import CellDir


def _o(verdict: str, decided_by: str = "") -> Outcome:
    return Outcome("x > y", verdict, 1.0, 2.0, "", decided_by)


def _banner(outcomes: list[Outcome], **kw) -> str:
    return cli_scenario.run_banner(run_verdict(outcomes, **kw), outcomes)


def test_banner_says_pass_fail_or_undecided_at_this_size():
    assert _banner([_o("PASS"), _o("PASS")]).startswith("[bold green]PASS[/] (2 pass")
    assert _banner([_o("PASS"), _o("FAIL")]).startswith("[bold red]FAIL[/] (1 pass, 1 fail")
    # undecided is never green: its own word and colour; allowed only for exploration
    small = _banner([_o("PASS"), _o("UNDECIDED", "5 violations")])
    assert small.startswith("[bold magenta]UNDECIDED[/]") and "green" not in small
    allowed = _banner([_o("PASS"), _o("UNDECIDED", "5 violations")], allow_undecided=True)
    assert allowed.startswith("[bold magenta]UNDECIDED[/]") and "not a pass" in allowed
    assert _banner([_o("UNDECIDED")]).startswith("[bold red]FAIL")
    assert _banner([_o("PASS")], interrupted=True).startswith("[bold yellow]INTERRUPTED")
    assert _banner([]).startswith("[bold]NOT JUDGED[/] (no checks")
    failed = _banner([_o("PASS")], rows=[{"cell": "00", "rep": 0, "status": "failed"}])
    assert failed.startswith("[bold red]FAIL") and "failed cell(s): 00 rep 0" in failed


def test_cells_table_shows_services_slices_and_failed_cells(monkeypatch):
    console = Console(width=200, record=True)
    monkeypatch.setattr(cli_scenario, "console", console)
    rows = [
        {"slicing": True, "matrix_params": ["slicing"], "cell": "00", "rep": 0, "status": "ok",
         "service": "imgcls", "requests": 450,
         "errors": 0, "slo_violation_rate": 0.0222, "mean_latency_ms": 242.2, "p99_latency_ms": 580.0,
         "mean_replicas": 6.0},
        {"slicing": True, "matrix_params": ["slicing"], "cell": "00", "rep": 0, "status": "ok",
         "slice": "be", "direction": "uplink",
         "iperf_goodput_mbit": 86.4, "iperf_error": None},
        {"slicing": False, "matrix_params": ["slicing"], "cell": "01", "rep": 0, "status": "failed",
         "service": "imgcls",
         "requests": 45, "errors": 4, "slo_violation_rate": None, "mean_latency_ms": None,
         "p99_latency_ms": None, "mean_replicas": None},
    ]
    cli_scenario.print_cells(rows)
    text = console.export_text()
    assert "slicing" in text.splitlines()[2]  # the matrix's parameter is a column
    assert "imgcls" in text and "2.2%" in text and "242" in text and "580" in text
    assert "slice be (uplink)" in text and "86.4" in text
    assert "failed" in text


def _headers(text: str) -> list[str]:
    """The column titles of the first table a console printed (its lines between ┏ and ┡)."""
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    bottom = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    cols: list[list[str]] = []
    for line in lines[top + 1:bottom]:
        parts = [p.strip() for p in line.strip("┃").split("┃")]
        cols = cols or [[] for _ in parts]
        for col, part in zip(cols, parts, strict=True):
            if part:
                col.append(part)
    return [" ".join(col) for col in cols]


def _cell(run: Path, slug: str, info: dict) -> CellDir:
    cell = CellDir.create(run, slug, 0)
    cell.info.write_text(json.dumps({"slug": slug, "label": slug, "rep": 0, "status": "ok",
                                     "problems": [], **info}))
    return cell


def _print(rows: list[dict], monkeypatch) -> str:
    console = Console(width=250, record=True)
    monkeypatch.setattr(cli_scenario, "console", console)
    cli_scenario.print_cells(rows)
    return console.export_text()


def test_cells_table_columns_are_the_matrix_parameters_then_figures(tmp_path, monkeypatch):
    # rows as a testbed cell's files give them: figures such as `ok` and `latency_sd_ms` are
    # in each row beside the parameters, and must not pass for parameters
    run = tmp_path / "run"
    for i, flows in enumerate((10, 20)):
        cell = _cell(run, f"{i:02d}-iperf_flows-{flows}", {
            "params": {"iperf_flows": flows, "testbed.link.delay_ms": 5}, "services": ["imgcls"],
            "time_scale": 1.0, "duration_s": 10})
        (cell.requests / "imgcls-ai-0.jsonl").write_text("".join(json.dumps(
            {"service": "imgcls", "seq": k + 1, "latency_ms": 100.0 + k, "latency_sched_ms": 101.0,
             "error": None}) + "\n" for k in range(5)))
        (cell.iperf / "be-downlink.json").write_text(json.dumps(
            {"end": {"sum_received": {"bits_per_second": 80e6}}}))
    rows = run_rows(run)
    assert "ok" in rows[0] and "latency_sd_ms" in rows[0]  # what fooled the table before
    text = _print(rows, monkeypatch)
    headers = _headers(text)
    assert "ok" not in headers and "latency_sd_ms" not in headers
    assert headers == ["iperf_flows", "testbed.link.delay_ms", "rep", "service / slice",
                       "requests", "errors", "SLO viol.", "mean ms", "p99 ms", "iperf3 Mbit/s",
                       "status"]
    assert "imgcls" in text and "slice be (downlink)" in text and "80.0" in text


def test_cells_table_of_a_simulated_run_shows_its_figures_not_its_labels(tmp_path, monkeypatch):
    run = tmp_path / "run"
    for i, policy in enumerate(("ppo", "rule_v2")):
        cell = _cell(run, f"{i:02d}-policy-{policy}", {
            "params": {"policy": policy}, "engine": "sim", "services": ["imgcls"],
            "total_units": 8, "ratios": {"imgcls": 0.4}, "policies": {"imgcls": policy}})
        (cell.path / "sim.json").write_text(json.dumps({"imgcls": {
            "slo_violation_rate": 0.0125, "instances": 1.6, "proc_time": 0.07, "reward": -0.021,
            "steps_per_second": 900.0}}))
    text = _print(run_rows(run), monkeypatch)
    # engine, total_units, ratio and steps_per_second are in each row, not matrix parameters;
    # the simulator counts no requests: no empty requests/errors/p99 columns
    assert _headers(text) == ["policy", "rep", "service", "SLO viol.", "mean ms", "replicas",
                              "reward", "status"]
    assert "1.2%" in text and "70" in text and "-0.021" in text and "rule_v2" in text
