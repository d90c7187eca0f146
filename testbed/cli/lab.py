"""Lab-profile work behind `testbed up|down|status --profile lab`; `testbed lab up|down|status` is
the old spelling, kept hidden for one release."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from testbed.cli import app, console

lab = typer.Typer(help="Old spelling of `testbed up|down|status --profile lab`.",
                  no_args_is_help=True, callback=lambda: _old_spelling())
app.add_typer(lab, name="lab", hidden=True)


def _old_spelling() -> None:
    from testbed.cli import err_console

    err_console.print("[dim]`testbed lab up|down|status` is the old spelling of "
                      "`testbed up|down|status --profile lab`[/]")

Inventory = typer.Option(..., "-i", "--inventory", exists=True, dir_okay=False,
                         help="Ansible inventory (see playbooks/inventory.example.yml).")
RunDir = typer.Option(None, "--run-dir", help="Where events and logs go (default: runs/<time>-lab-*).")


@lab.command("up")
def up(inventory: Path = Inventory,
       testbed_file: Path = typer.Option(None, "--testbed", "-t", help="Testbed YAML (default: built-in)."),
       rendered: Path = typer.Option(None, "--rendered", help="Output dir of `testbed render`."),
       manifests: Path = typer.Option(None, "--manifests", help="The service images' build contexts, "
                                      "<dir>/Dockerfile (default: workloads/)."),
       profiles: Path = typer.Option(None, "--profiles", exists=True, dir_okay=False,
                                     help="A service profile file: its services are deployed too "
                                          "(each from its deploy:)."),
       check: bool = typer.Option(False, "--check", help="Ansible check mode: report, change nothing."),
       run_dir: Path = RunDir) -> None:
    """Run playbooks/site.yml; each service's manifest is generated from its profile's deploy:.

    Example: testbed up --profile lab -i inventory.yml --rendered rendered/ --check
    """
    # the lab layer (pydantic models, jinja2): loaded only when this command runs (fast CLI start)
    from testbed.config import load_testbed
    from testbed.lab import lab_up

    result = lab_up(load_testbed(testbed_file), inventory, check, run_dir,
                    rendered_dir=rendered, manifests_dir=manifests, profiles_file=profiles,
                    console=console)
    console.print(f"[green]lab up{' (check mode)' if check else ''}:[/] {result.tasks_ok} tasks ok, "
                  f"{result.total_changed} changed; events: {result.events_file}")


@lab.command("down")
def down(inventory: Path = Inventory, run_dir: Path = RunDir) -> None:
    """Run playbooks/reset.yml: remove everything `up --profile lab` started.

    Example: testbed down --profile lab -i inventory.yml
    """
    # the lab layer (pydantic models, jinja2): loaded only when this command runs (fast CLI start)
    from testbed.lab import lab_down

    result = lab_down(inventory, run_dir, console=console)
    console.print(f"[green]lab down:[/] {result.total_changed} changes; events: {result.events_file}")


@lab.command("status")
def status(inventory: Path = Inventory, run_dir: Path = RunDir,
           kubeconfig: Path = typer.Option(None, "--kubeconfig", help="Default: RUN_DIR/kubeconfig."),
           prometheus: str = typer.Option(None, "--prometheus", help="e.g. http://gpu1:30090")) -> None:
    """Show NFs, gNB/UEs, subscribers, PDU sessions, nodes and GPU units, replicas and Prometheus
    targets.

    Example: testbed status --profile lab -i inventory.yml --run-dir runs/X --prometheus http://gpu1:30090
    """
    # the lab layer (pydantic models, jinja2): loaded only when this command runs (fast CLI start)
    from testbed.lab import lab_status
    from testbed.paths import RUNS_DIR, new_run_dir

    st = lab_status(inventory, run_dir or new_run_dir(RUNS_DIR, "lab-status"), kubeconfig=kubeconfig,
                    prometheus_url=prometheus, console=console)
    units = Table("host", "unit", "state", title="testbed units")
    for host, rows in st.units.items():
        for unit, state in rows:
            units.add_row(host, unit, state)
    console.print(units)
    for host, count in st.subscribers.items():
        console.print(f"{host}: {count.get('subscribers', 0)} of {count.get('expected', 0)} "
                      f"subscribers of the testbed in MongoDB ({count.get('store_total', 0)} in all)")
    for host, addrs in st.ue_addresses.items():
        console.print(f"{host}: {len(addrs)} PDU sessions ({', '.join(addrs)})")
    cluster = Table("node", "GPU units", title="cluster")
    for node, gpu in st.nodes.items():
        cluster.add_row(node, str(gpu))
    console.print(cluster)
    for name, (ready, want) in st.replicas.items():
        console.print(f"deployment {name}: {ready}/{want} ready")
    if st.prometheus_targets:
        targets = ", ".join(f"{k} {v}" for k, v in st.prometheus_targets.items())
        console.print(f"prometheus targets: {targets}")
    for p in st.problems:
        console.print(f"[yellow]{p}[/]")
