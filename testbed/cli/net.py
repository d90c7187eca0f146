"""Data-plane commands: up, down, status, exec, traffic iperf, demo."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from testbed.cli import app, checks, console
from testbed.errors import StateError, TestbedError
from testbed.net.cmd import require_binaries, require_root
from testbed.paths import RUNS_DIR, stamped

if TYPE_CHECKING:
    from testbed.bringup.local import LocalTestbed
    from testbed.net.iperf import IperfResult
    from testbed.net.state import TestbedState

# the testbed file is `--testbed/-t` in every command (`--config/-c` still works, as before)
ConfigOpt = Annotated[Path | None, typer.Option("--testbed", "-t", "--config", "-c",
                                                envvar="TESTBED_FILE", help="Testbed file (YAML); "
                                                "the built-in default when omitted.")]


def _testbed_name(value: str | None) -> str | None:
    """Every command's --name passes the testbed-name check before it touches a path."""
    if value is None:
        return None
    from testbed.net.state import check_name  # the config models behind it: only when --name is given

    try:
        return check_name(value)
    except StateError as exc:
        raise typer.BadParameter(str(exc)) from None


NameOpt = Annotated[str | None, typer.Option("--name", "-n", callback=_testbed_name,
                                             help="Which testbed (its `name:`); needed only "
                                             "when several are up.")]
ProfileOpt = Annotated[str | None, typer.Option("--profile", help="local (namespaces on this "
                                                "machine) or lab (real servers via Ansible); "
                                                "default: the testbed file's `profile:`.")]
InventoryOpt = Annotated[Path | None, typer.Option("--inventory", "-i", help="Ansible inventory "
                                                   "(lab profile).")]
RunDirOpt = Annotated[Path | None, typer.Option("--run-dir", help="Lab profile: where events, "
                                                "logs and the kubeconfig are kept.")]


def _lab_inventory(inventory: Path | None, remembered: bool = False) -> Path:
    if inventory is None and remembered:
        # `down` undoes the newest `up`: its run directory's lab.json names the inventory
        for lab_json in sorted(RUNS_DIR.glob("*-lab-*/lab.json"), reverse=True):
            with contextlib.suppress(OSError, ValueError, KeyError):
                inventory = Path(json.loads(lab_json.read_text())["inventory"])
                console.print(f"inventory of the last `up` ({lab_json.parent}): {inventory}")
                break
    if inventory is None:
        raise typer.BadParameter("the lab profile needs -i INVENTORY "
                                 "(see playbooks/inventory.example.yml)")
    if not inventory.is_file():
        raise typer.BadParameter(f"inventory {inventory} not found")
    return inventory


def _check_profile(profile: str | None) -> None:
    if profile not in (None, "local", "lab"):
        raise typer.BadParameter(f"--profile must be local or lab, not {profile!r}")

traffic_app = typer.Typer(help="Run traffic through a running testbed.", no_args_is_help=True)
app.add_typer(traffic_app, name="traffic")


def _sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _running(name: str | None) -> TestbedState:
    # the state files: their specs are built (pydantic) only when one is loaded
    from testbed.net.state import load_state, recorded_names

    if name is not None:
        return load_state(name)
    names = recorded_names()
    if not names:
        raise StateError("no testbed is up; start one with `testbed up`")
    if len(names) > 1:
        raise StateError(f"several testbeds are up ({', '.join(names)}); pick one with --name")
    return load_state(names[0])


def _topology(state: TestbedState) -> LocalTestbed:
    # state files and the data plane need the config models (pydantic): only when used
    from testbed.bringup.local import LocalTestbed

    return LocalTestbed(state.testbed_spec())


@app.command()
def init(directory: Annotated[Path, typer.Argument(help="Where to write the files.")] = Path("."),
         scenario: Annotated[bool, typer.Option("--scenario", help="Also write scenario.yaml, a "
                                                "starter scenario that uses testbed.yaml.")] = False,
         force: Annotated[bool, typer.Option("--force", help="Overwrite files that exist.")] = False,
         ) -> None:
    """Write the built-in testbed file (testbed.yaml) to edit, and with --scenario a starter
    scenario beside it.

    Example: [bold]testbed init --scenario && testbed up -t testbed.yaml && testbed run scenario.yaml[/]
    """
    from importlib import resources

    files = {"testbed.yaml": "default_testbed.yaml"}
    if scenario:
        files["scenario.yaml"] = "starter_scenario.yaml"
    targets = {directory / name: packaged for name, packaged in files.items()}
    existing = [str(t) for t in targets if t.exists()]
    if existing and not force:  # before the first file: nothing half-written
        raise StateError(f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''} "
                         "(--force overwrites)")
    checks.writable_dir("DIRECTORY", directory)
    for target, packaged in targets.items():
        target.write_text(resources.files("testbed.config").joinpath(packaged).read_text())
        console.print(f"wrote {target}")


@app.command()
def up(config: ConfigOpt = None,
       no_slicing: Annotated[bool, typer.Option("--no-slicing", help="One shared class for all "
                                                "traffic (the no-slice baseline).")] = False,
       profile: ProfileOpt = None, inventory: InventoryOpt = None,
       check: Annotated[bool, typer.Option("--check", help="Lab profile: Ansible check mode, "
                                           "changes nothing.")] = False,
       rendered: Annotated[Path | None, typer.Option("--rendered", help="Lab profile: configs "
                                                     "from `testbed render` to use as they are "
                                                     "(default: rendered from the testbed file "
                                                     "and inventory).")] = None,
       manifests: Annotated[Path | None, typer.Option("--manifests", help="Lab profile: the "
                                                      "service images' build contexts, "
                                                      "<dir>/Dockerfile (default: workloads/).")] = None,
       profiles: Annotated[Path | None, typer.Option("--profiles", exists=True, dir_okay=False,
                                                     help="Lab profile: a service profile file "
                                                     "whose services are deployed too (each from "
                                                     "its deploy:).")] = None,
       run_dir: RunDirOpt = None,
       mongo_uri: Annotated[str | None, typer.Option(help="Subscriber store (default: the "
                                                     "testbed file's core.mongo_uri, a local "
                                                     "mongod, or the embedded store).")] = None
       ) -> None:
    """Bring up a testbed: on the local profile namespaces, links and slice shaping; on the lab
    profile the whole DRAFAS testbed on real servers (playbooks/site.yml).

    Example: [bold]testbed up -t testbed.yaml[/]   or   [bold]testbed up --profile lab -i inventory.yml[/]
    """
    # pydantic models and the data plane: loaded only when this command runs (fast CLI start)
    from testbed.bringup.local import LocalTestbed
    from testbed.config import load_testbed

    _check_profile(profile)
    spec = load_testbed(config)
    if (profile or spec.profile) == "lab":
        from testbed.cli import lab

        lab.up(inventory=_lab_inventory(inventory), testbed_file=config, rendered=rendered,
               manifests=manifests, profiles=profiles, check=check, run_dir=run_dir)
        return
    if no_slicing:
        spec = spec.model_copy(update={"link": spec.link.model_copy(update={"slicing": False})})
    _sigterm_as_interrupt()
    t0 = time.monotonic()
    tb = LocalTestbed(spec, provision=True, mongo_uri=mongo_uri)
    with console.status(f"bringing up testbed [bold]{spec.name}[/]…"):
        tb.up()
    topo = tb.topology
    console.print(f"subscribers: {tb.provisioned}")
    console.print(f"[green]up[/] testbed [bold]{spec.name}[/] in {time.monotonic() - t0:.2f} s: "
                  f"{len(topo.namespaces)} namespaces, {len(spec.slices)} slices, "
                  f"{len(topo.ues)} UEs, bottleneck {spec.link.capacity_mbit:g} Mbit/s "
                  f"({'sliced' if spec.link.slicing else 'no slicing'}); "
                  f"data network at {topo.dn_addr}")


@app.command()
def down(name: NameOpt = None,
         all_: Annotated[bool, typer.Option("--all", help="Every recorded testbed.")] = False,
         force: Annotated[bool, typer.Option("--force", help="Also a testbed whose owning "
                                             "process (e.g. a running scenario) is alive.")] = False,
         profile: ProfileOpt = None, inventory: InventoryOpt = None,
         run_dir: RunDirOpt = None) -> None:
    """Remove a testbed and everything it started; works after a crash from its state file.
    Without --name it leaves alone a testbed whose owning process still runs (--force takes it).
    On the lab profile, undo `up` on the servers (playbooks/reset.yml).

    Example: [bold]testbed down[/]   or   [bold]testbed down --all[/]
    Lab: [bold]testbed down --profile lab [-i inventory.yml][/] (default: the last `up`'s inventory)
    """
    # the state files are listed without the specs' models (fast when nothing is up)
    from testbed.net.state import recorded_names

    _check_profile(profile)
    if profile == "lab":
        from testbed.cli import lab

        lab.down(inventory=_lab_inventory(inventory, remembered=True), run_dir=run_dir)
        return
    require_root("testbed down")
    if all_:
        names = recorded_names()
    elif name is not None:
        names = [name]
    else:
        names = recorded_names()
        if len(names) > 1:
            raise StateError(f"several testbeds are up ({', '.join(names)}); "
                             "pick one with --name or use --all")
    if not names:
        console.print("nothing to remove: no testbed is recorded as up")
        return
    # pydantic models and the data plane: only once there is a testbed to remove
    from testbed.bringup.local import teardown

    in_use: list[str] = []
    for n in names:
        owner = _owner(n)
        if owner and name is None and not force:
            in_use.append(f"testbed {n!r} is in use by {owner}")
            continue
        t0 = time.monotonic()
        removed = teardown(n, missing_ok=name is None)  # a name asked for must exist
        whose = f"; it belonged to {escape(owner)}, still running" if owner else ""
        console.print(f"[green]down[/] testbed [bold]{n}[/] in {time.monotonic() - t0:.2f} s "
                      f"({len(removed)} namespaces removed){whose}", highlight=False)
    if in_use:
        raise StateError(f"{'; '.join(in_use)}: not removed (`testbed down --force` removes it "
                         "anyway, and that run loses its testbed)")


def _owner(name: str) -> str | None:
    # state files and the data plane need the config models (pydantic): only when used
    from testbed.net.state import live_owner, load_state

    try:
        return live_owner(load_state(name))
    except StateError:  # no or unreadable state file: nobody to protect
        return None


@app.command()
def status(name: NameOpt = None,
           as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
           profile: ProfileOpt = None, inventory: InventoryOpt = None, run_dir: RunDirOpt = None,
           kubeconfig: Annotated[Path | None, typer.Option(help="Lab profile: default "
                                                           "RUN_DIR/kubeconfig.")] = None,
           prometheus: Annotated[str | None, typer.Option(help="Lab profile: Prometheus URL.")]
           = None) -> None:
    """Show namespaces, addresses and per-slice HTB counters of a running testbed; on the lab
    profile NFs, gNB, UEs and PDU sessions, nodes, GPUs, replicas and Prometheus targets.

    Example: [bold]testbed status[/]
    Lab: [bold]testbed status --profile lab -i inventory.yml --run-dir runs/X[/]
    """
    _check_profile(profile)
    if profile == "lab":
        from testbed.cli import lab

        if run_dir is None:
            raise typer.BadParameter("the lab profile needs --run-dir (the `up` run's directory)")
        lab.status(inventory=_lab_inventory(inventory), run_dir=run_dir, kubeconfig=kubeconfig,
                   prometheus=prometheus)
        return
    require_root("testbed status")
    state = _running(name)
    # the data plane's models (pydantic): only once a testbed is up (fast when none is)
    from testbed.bringup.local import class_counters

    tb = _topology(state)
    counters = class_counters(state)
    if as_json:
        print(json.dumps({
            "name": state.name, "status": state.status, "namespaces": state.namespaces,
            "dn_addr": str(tb.topology.dn_addr),
            "ues": [{"group": u.group, "slice": u.slice, "address": str(u.address),
                     "namespace": u.host.name} for u in tb.topology.ues],
            "classes": [c.__dict__ for c in counters],
        }, indent=2))
        return
    console.print(f"testbed [bold]{state.name}[/] ({state.status}), data network "
                  f"{tb.topology.dn_addr}, bottleneck {tb.spec.link.capacity_mbit:g} Mbit/s")
    ues = Table("namespace", "slice", "UE addresses", title="UE groups")
    for group, host in tb.topology.ue_hosts.items():
        addrs = ", ".join(str(u.address) for u in tb.topology.ues_of_group(group))
        ues.add_row(host.name, tb.topology.slice_of_group(group).name, addrs)
    console.print(ues)
    classes = Table("dir", "slice", "class", "rate", "ceil", "bytes", "packets", "drops",
                    "overlimits", "backlog", title="HTB classes on the UPF (rates in Mbit/s)")
    for c in counters:
        direction = "up" if c.direction == "uplink" else "down"
        classes.add_row(direction, c.slice if c.slice != "-" else "(default)", c.classid,
                        f"{c.rate_mbit:g}", f"{c.ceil_mbit:g}", f"{c.bytes:,}", f"{c.packets:,}",
                        str(c.drops), str(c.overlimits), str(c.backlog_packets))
    console.print(classes)


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(ue: Annotated[str, typer.Argument(help="UE group name (its namespace).")],
          command: Annotated[list[str], typer.Argument(help="Command and arguments, after --.")],
          name: NameOpt = None) -> None:
    """Run a command inside a UE group's namespace (TESTBED_UE_ADDR = its first UE's address).

    Example: [bold]testbed exec ai -- ping -c 3 10.200.0.2[/]
    """

    require_root("testbed exec")
    state = _running(name)
    tb = _topology(state)
    if ue not in tb.topology.ue_hosts:
        raise TestbedError(f"no UE group {ue!r} (groups: {', '.join(tb.topology.ue_hosts)})")
    env = dict(os.environ, TESTBED_UE_ADDR=str(tb.topology.ues_of_group(ue)[0].address),
               TESTBED_DN_ADDR=str(tb.topology.dn_addr))
    sys.stdout.flush()
    os.execvpe("ip", ["ip", "netns", "exec", tb.topology.ue_hosts[ue].name, *command], env)


def print_iperf(results: list[IperfResult], per_flow: bool = True) -> None:
    table = Table("slice", "UE", "direction", "flow", "goodput Mbit/s", "retransmits", "RTT ms")
    for r in results:
        if per_flow and len(r.flows) > 1:
            for f in r.flows:
                table.add_row(r.slice, r.ue, r.direction, str(f.stream), f"{f.goodput_mbit:.2f}",
                              _fmt(f.retransmits), _fmt(f.mean_rtt_ms))
        table.add_row(f"[bold]{r.slice}[/]", r.ue, r.direction, "total",
                      f"[bold]{r.total_mbit:.2f}[/]", _fmt(r.retransmits), _fmt(r.mean_rtt_ms))
    console.print(table)


def _fmt(v: float | int | None) -> str:
    if v is None:
        return "–"
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def _run_dir(out: Path | None, label: str) -> Path:
    return out or stamped(label)


@traffic_app.command("iperf")
def traffic_iperf(
    slice_: Annotated[str, typer.Option("--slice", "-s", help="Slice whose UE sends.")],
    flows: Annotated[int, typer.Option("--flows", "-P", min=1, max=128, help="Parallel flows.")] = 1,
    duration: Annotated[float, typer.Option("--duration", "-t", min=1, help="Seconds.")] = 10,
    reverse: Annotated[bool, typer.Option("--reverse", "-R", help="Downlink (DN → UE).")] = False,
    omit: Annotated[int, typer.Option(help="Seconds of slow start to leave out.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    out: Annotated[Path | None, typer.Option(help="Where iperf3's JSON is kept "
                                             "(default runs/<time>-iperf/).")] = None,
    name: NameOpt = None,
) -> None:
    """iperf3 between a slice's UE and the data network: per-flow and total goodput.

    Example: [bold]testbed traffic iperf --slice be --flows 10 --duration 10 --reverse[/]
    """
    # pydantic models and the data plane: loaded only when this command runs (fast CLI start)
    from testbed.net.iperf import IperfSession, save_json

    require_root("testbed traffic")
    require_binaries("iperf3")
    run_dir = _run_dir(out, "iperf")
    checks.writable_dir("--out", run_dir)  # before the flows: a result must not be lost after
    _sigterm_as_interrupt()
    tb = _topology(_running(name))
    session = IperfSession.start(tb.topology, slice_, flows=flows, duration=duration,
                                 reverse=reverse, omit=omit)
    try:
        with console.status(f"iperf3: {flows} flow(s) in slice {slice_} for {duration:g} s…"):
            result = session.wait()
    finally:
        session.stop()
    path = save_json(result, run_dir, f"iperf3-{slice_}-{result.direction}")
    if as_json:
        print(json.dumps({**result.summary(), "json": str(path)}, indent=2))
        return
    print_iperf([result])
    console.print(f"iperf3 JSON kept in {path}")


@app.command()
def demo(
    config: ConfigOpt = None,
    flows: Annotated[int, typer.Option(help="Best-effort flows beside the AI flow.")] = 10,
    duration: Annotated[float, typer.Option(help="Seconds per measurement.")] = 5,
) -> None:
    """The main job on the local profile: bring up a testbed, show slicing at work with iperf3
    (with and without slicing, uplink), print a summary, tear down.

    Example: [bold]testbed demo --flows 20[/]
    """
    # pydantic models and the data plane: loaded only when this command runs (fast CLI start)
    from testbed.bringup.local import LocalTestbed
    from testbed.config import load_testbed
    from testbed.net.iperf import IperfSession

    require_root("testbed demo")
    require_binaries("ip", "tc", "iperf3")
    _sigterm_as_interrupt()
    base = load_testbed(config)
    if len(base.slices) < 2:
        raise TestbedError("the demo needs two slices (a guaranteed one and a best-effort one)")
    guaranteed = max(base.slices, key=lambda s: s.guaranteed_mbit)
    besteffort = next(s for s in base.slices if s.name != guaranteed.name)
    rows = []
    for slicing in (True, False):
        spec = base.model_copy(update={"link": base.link.model_copy(update={"slicing": slicing})})
        label = "sliced" if slicing else "no slicing"
        status = console.status(f"{label}: 1 flow in {guaranteed.name!r} vs {flows} in "
                                f"{besteffort.name!r} for {duration:g} s…")
        # each session is stopped on the way out, the first too when the second fails to start
        with (status, LocalTestbed(spec) as tb,
              IperfSession.start(tb.topology, guaranteed.name, flows=1, duration=duration,
                                 omit=1) as a,
              IperfSession.start(tb.topology, besteffort.name, flows=flows, duration=duration,
                                 omit=1) as b):
            ra, rb = a.wait(), b.wait()
        rows.append((label, ra, rb))
    table = Table("shaping", f"{guaranteed.name} goodput", f"{guaranteed.name} RTT ms",
                  f"{besteffort.name} goodput ({flows} flows)", "link",
                  title=f"Slice {guaranteed.name!r} guaranteed {guaranteed.guaranteed_mbit:g} "
                        f"Mbit/s of {base.link.capacity_mbit:g} Mbit/s (uplink)")
    for label, ra, rb in rows:
        ok = ra.total_mbit >= 0.95 * guaranteed.guaranteed_mbit
        mark = "[green]✓[/]" if ok else "[red]✗[/]"
        table.add_row(label, f"{mark} {ra.total_mbit:.1f} Mbit/s", _fmt(ra.mean_rtt_ms),
                      f"{rb.total_mbit:.1f} Mbit/s", f"{ra.total_mbit + rb.total_mbit:.1f} Mbit/s")
    console.print(table)
    console.print("testbed removed; nothing left behind.")
