"""The end of `testbed run`: a table of what each cell measured and a one-line verdict."""

from rich.console import Console

from testbed.cli import scenario as cli_scenario
from testbed.scenario.expect import Outcome


def _o(verdict: str, decided_by: str = "") -> Outcome:
    return Outcome("x > y", verdict, 1.0, 2.0, "", decided_by)


def test_banner_says_pass_fail_or_undecided_at_this_size():
    assert cli_scenario.run_banner([_o("PASS"), _o("PASS")], interrupted=False).startswith(
        "[bold green]PASS[/] (2 pass")
    assert cli_scenario.run_banner([_o("PASS"), _o("FAIL")], interrupted=False).startswith(
        "[bold red]FAIL[/] (1 pass, 1 fail")
    # undecided because the run is small does not fail it; undecided for lost data does
    small = cli_scenario.run_banner([_o("PASS"), _o("UNDECIDED", "5 violations")], interrupted=False)
    assert small.startswith("[bold green]PASS[/]") and "undecided at this size" in small
    assert cli_scenario.run_banner([_o("UNDECIDED")], interrupted=False).startswith("[bold red]FAIL")
    assert cli_scenario.run_banner([_o("PASS")], interrupted=True).startswith("[bold yellow]INTERRUPTED")


def test_cells_table_shows_services_slices_and_failed_cells(monkeypatch):
    console = Console(width=200, record=True)
    monkeypatch.setattr(cli_scenario, "console", console)
    rows = [
        {"slicing": True, "cell": "00", "rep": 0, "status": "ok", "service": "imgcls", "requests": 450,
         "errors": 0, "slo_violation_rate": 0.0222, "mean_latency_ms": 242.2, "p99_latency_ms": 580.0,
         "mean_replicas": 6.0},
        {"slicing": True, "cell": "00", "rep": 0, "status": "ok", "slice": "be", "direction": "uplink",
         "iperf_goodput_mbit": 86.4, "iperf_error": None},
        {"slicing": False, "cell": "01", "rep": 0, "status": "failed", "service": "imgcls",
         "requests": 45, "errors": 4, "slo_violation_rate": None, "mean_latency_ms": None,
         "p99_latency_ms": None, "mean_replicas": None},
    ]
    cli_scenario.print_cells(rows)
    text = console.export_text()
    assert "slicing" in text.splitlines()[2]  # the matrix's parameter is a column
    assert "imgcls" in text and "2.2%" in text and "242" in text and "580" in text
    assert "slice be (uplink)" in text and "86.4" in text
    assert "failed" in text
