"""Core and RAN commands: slice apply/list/diff, subscriber show/list/delete, render, ue up/list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from testbed.cli import app, checks, console
from testbed.errors import ConfigError, ConfigProblem, StateError

if TYPE_CHECKING:
    from testbed.config import TestbedSpec
    from testbed.core.store import ApplyPlan
    from testbed.core.subscriber import Subscriber

slice_app = typer.Typer(help="Slices and their subscribers in the Open5GS store.", no_args_is_help=True)
subscriber_app = typer.Typer(help="Subscriber documents in the Open5GS store.", no_args_is_help=True)
render_app = typer.Typer(help="Render Open5GS or UERANSIM configs from a testbed file "
                              "(and a lab inventory's addresses).",
                         no_args_is_help=True)
ue_app = typer.Typer(help="UE groups: bring up, list.", no_args_is_help=True)
app.add_typer(slice_app, name="slice")
app.add_typer(subscriber_app, name="subscriber")
app.add_typer(render_app, name="render")
app.add_typer(ue_app, name="ue")

TestbedOpt = typer.Option(None, "--testbed", "-t", "--config", "-c", envvar="TESTBED_FILE",
                          help="Testbed file (default: the built-in one).")
MongoOpt = typer.Option(None, "--mongo-uri", envvar="TESTBED_MONGO_URI",
                        help="MongoDB of Open5GS, e.g. mongodb://10.0.0.2/open5gs "
                             "(default: core.mongo_uri, else a local mongod or the embedded store).")
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of a table.")
SecretsOpt = typer.Option(False, "--show-secrets", help="Print K/OPc in clear (never logged).")
InventoryOpt = typer.Option(None, "--inventory", "-i", dir_okay=False,
                            help="Lab inventory: the addresses hosts reach each other on "
                                 "(see playbooks/inventory.example.yml).")


def _spec(path: Path | None) -> TestbedSpec:
    from testbed.config import load_testbed  # pydantic models: only for commands that read one

    return load_testbed(path)


def _doc(sub: Subscriber, show_secrets: bool) -> dict[str, Any]:
    return sub.to_document() if show_secrets else sub.masked()


def _check_imsi(imsi: str) -> str:
    if not (imsi.isascii() and imsi.isdigit() and len(imsi) == 15):
        raise ConfigError([ConfigProblem("<command line>", None, "IMSI",
                                         f"must be 15 digits, got {imsi!r}")])
    return imsi


def _plan_json(plan: ApplyPlan, show_secrets: bool) -> dict[str, Any]:
    return {
        "summary": plan.summary(),
        "create": [_doc(s, show_secrets) for s in plan.create],
        "update": [{"imsi": c.imsi, "fields": c.fields, "document": _doc(s, show_secrets)}
                   for s, c in plan.update],
        "unchanged": plan.unchanged,
        "delete": plan.delete,
        "extra": plan.extra,
    }


@slice_app.command("apply")
def slice_apply(
    file: Path | None = typer.Argument(None, help="Testbed file with slices, UE groups and core "
                                       "(or --testbed, as in every other command)."),
    testbed: Path | None = TestbedOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be written; write nothing."),
    as_json: bool = JsonOpt,
    prune: bool = typer.Option(False, "--prune", help="Also delete subscribers the file does not name."),
    show_secrets: bool = SecretsOpt,
    mongo_uri: str | None = MongoOpt,
) -> None:
    """Provision every UE of every group as an Open5GS subscriber; idempotent, all or nothing.

    Example: testbed slice apply testbed.yaml --dry-run --json
    """
    # pydantic models and the store: loaded only when this command runs (fast CLI start)
    from testbed.core.backend import open_store
    from testbed.core.provision import desired_ues

    spec = _spec(_one_file(file, testbed))
    desired = desired_ues(spec)
    with (console.status("opening the subscriber store"),
          open_store(spec, mongo_uri, create=not dry_run) as opened):  # a dry run creates nothing
        store = opened.store
        plan = store.plan(desired, prune) if dry_run else store.apply(desired, prune)
    if as_json:
        print(json.dumps(_plan_json(plan, show_secrets), indent=2))
        return
    verb = "would be" if dry_run else "was"
    for sub in plan.create:
        console.print(f"[green]+[/] {sub.imsi} {verb} created")
    for sub, change in plan.update:
        console.print(f"[yellow]~[/] {sub.imsi}: {', '.join(change.fields)}")
    for imsi in plan.delete:
        console.print(f"[red]-[/] {imsi} {verb} deleted")
    prefix = "dry run: " if dry_run else ""
    console.print(f"{prefix}{plan.summary()}  [dim]({opened.kind}: {opened.where})[/]", highlight=False)


def _one_file(positional: Path | None, option: Path | None) -> Path | None:
    """The testbed file given either way (the built-in one when neither is)."""
    if positional is not None and option is not None and positional != option:
        raise typer.BadParameter(f"two testbed files: {positional} and --testbed {option}")
    return positional or option


@slice_app.command("diff")
def slice_diff(file: Path | None = typer.Argument(None, help="Testbed file (or --testbed)."),
               testbed: Path | None = TestbedOpt,
               mongo_uri: str | None = MongoOpt) -> None:
    """Compare the testbed file's subscribers with the store (field names only, never values).

    Example: testbed slice diff testbed.yaml
    """
    # pydantic models and the store: loaded only when this command runs (fast CLI start)
    from testbed.core.backend import open_store
    from testbed.core.provision import desired_ues

    spec = _spec(_one_file(file, testbed))
    with open_store(spec, mongo_uri) as opened:
        plan = opened.store.plan(desired_ues(spec))
    for sub in plan.create:
        console.print(f"[green]+[/] {sub.imsi} (in the file, not in the store)")
    for sub, change in plan.update:
        console.print(f"[yellow]~[/] {sub.imsi}: {', '.join(change.fields)}")
    for imsi in plan.extra:
        console.print(f"[red]-[/] {imsi} (in the store, not in the file)")
    console.print(f"{len(plan.create)} missing, {len(plan.update)} different, "
                  f"{len(plan.unchanged)} equal, {len(plan.extra)} extra")


@slice_app.command("list")
def slice_list(testbed: Path | None = TestbedOpt, mongo_uri: str | None = MongoOpt,
               as_json: bool = JsonOpt) -> None:
    """Slices of the testbed with their S-NSSAI, DNN, subnet and subscriber counts in the store.

    Example: testbed slice list -t testbed.yaml
    """
    # pydantic models and the store: loaded only when this command runs (fast CLI start)
    from testbed.core.backend import open_store

    spec = _spec(testbed)
    with open_store(spec, mongo_uri) as opened:
        by_slice = opened.store.ue_groups_by_slice(spec)
    rows = []
    for s in spec.slices:
        in_spec = sum(g.count for g in spec.groups_of(s.name))
        stored = sum(len(m) for m in by_slice[s.name].values())
        rows.append({"name": s.name, "sst": s.sst, "sd": s.sd, "dnn": s.dnn, "subnet": str(s.subnet),
                     "guaranteed_mbit": s.guaranteed_mbit, "ues": in_spec, "provisioned": stored})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("slice", "S-NSSAI", "DNN", "subnet", "guaranteed", "UEs", "provisioned")
    for r in rows:
        snssai = f"{r['sst']}/{r['sd']}" if r["sd"] else str(r["sst"])
        table.add_row(r["name"], snssai, r["dnn"], r["subnet"], f"{r['guaranteed_mbit']:g} Mbit/s",
                      str(r["ues"]), str(r["provisioned"]))
    console.print(table)


@subscriber_app.command("show")
def subscriber_show(imsi: str = typer.Argument(..., help="15-digit IMSI."), as_json: bool = JsonOpt,
                    show_secrets: bool = SecretsOpt, testbed: Path | None = TestbedOpt,
                    mongo_uri: str | None = MongoOpt) -> None:
    """One subscriber document, K/OPc masked unless --show-secrets.

    Example: testbed subscriber show 001010000000001 --json
    """
    # pydantic models and the store: loaded only when this command runs (fast CLI start)
    from testbed.core.backend import open_store

    _check_imsi(imsi)
    spec = _spec(testbed)
    with open_store(spec, mongo_uri) as opened:
        sub = opened.store.get(imsi)
    if sub is None:
        raise StateError(f"no subscriber with IMSI {imsi}")
    doc = _doc(sub, show_secrets)
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        console.print_json(data=doc)


@subscriber_app.command("list")
def subscriber_list(testbed: Path | None = TestbedOpt, mongo_uri: str | None = MongoOpt,
                    as_json: bool = JsonOpt) -> None:
    """All subscribers in the store: IMSI, S-NSSAI, DNN, static address, AMBR.

    Example: testbed subscriber list
    """
    # pydantic models and the store: loaded only when this command runs (fast CLI start)
    from testbed.core.backend import open_store

    spec = _spec(testbed)
    with open_store(spec, mongo_uri) as opened:
        subs = opened.store.list()
    rows = [{"imsi": s.imsi,
             "snssai": [f"{e.sst}/{e.sd}" if e.sd else str(e.sst) for e in s.slice],
             "dnn": [x.name for e in s.slice for x in e.session],
             "address": str(s.address) if s.address else None,
             "ambr_dl": str(s.ambr.downlink), "ambr_ul": str(s.ambr.uplink)} for s in subs]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("IMSI", "S-NSSAI", "DNN", "address", "AMBR DL", "AMBR UL")
    for r in rows:
        table.add_row(r["imsi"], ",".join(r["snssai"]), ",".join(r["dnn"]), r["address"] or "-",
                      r["ambr_dl"], r["ambr_ul"])
    console.print(table)
    console.print(f"{len(rows)} subscribers")


@subscriber_app.command("delete")
def subscriber_delete(imsis: list[str] = typer.Argument(..., help="IMSIs to delete."),
                      testbed: Path | None = TestbedOpt, mongo_uri: str | None = MongoOpt) -> None:
    """Delete subscribers; all or nothing (an unknown IMSI deletes none).

    Example: testbed subscriber delete 001010000000001 001010000000002
    """
    # pydantic models and the store: loaded only when this command runs (fast CLI start)
    from testbed.core.backend import open_store

    for imsi in imsis:
        _check_imsi(imsi)
    spec = _spec(testbed)
    with open_store(spec, mongo_uri) as opened:
        n = opened.store.delete(imsis)
    console.print(f"{n} deleted")


def _render(kind: str, outdir: Path, testbed: Path | None, inventory: Path | None) -> None:
    # the renderers (jinja2) and the inventory model: loaded only for `render` (fast CLI start)
    from testbed.core.render import OPEN5GS_RELEASE
    from testbed.lab.inventory import LabInventory
    from testbed.lab.render import peer_addresses, render_part
    from testbed.ran.render import UERANSIM_RELEASE

    spec = _spec(testbed)
    # a bad address stops here, before the output folder exists
    addresses = (peer_addresses(spec, LabInventory.load(inventory)) if inventory is not None
                 else None)
    checks.writable_dir("--output", outdir)  # before the first file: no half-rendered folder
    release = f"Open5GS {OPEN5GS_RELEASE}" if kind == "open5gs" else f"UERANSIM {UERANSIM_RELEASE}"
    written = render_part(kind, spec, addresses, outdir)
    for path in written:
        console.print(f"wrote {path}", highlight=False)
    where = f", addresses from {inventory}" if inventory is not None else ", on one host"
    console.print(f"{len(written)} {release} files for testbed {spec.name}{where}")


@render_app.command("open5gs")
def render_open5gs_cmd(outdir: Path = typer.Option(..., "--output", "-o", help="Directory to write."),
                       testbed: Path | None = TestbedOpt, inventory: Path | None = InventoryOpt) -> None:
    """Open5GS v2.7.x configs: AMF, NSSF, one SMF + UPF per slice, other NFs, compose.yaml.

    With -i, what `testbed up --profile lab` uses: the AMF's NGAP on the core host's `amf_ngap_address`,
    each UPF's GTP-U on its `upf_n3_address`. Without, a core and gNB on one host.

    Example: testbed render open5gs -i inventory.yml -o rendered/open5gs
    """
    _render("open5gs", outdir, testbed, inventory)


@render_app.command("ueransim")
def render_ueransim_cmd(outdir: Path = typer.Option(..., "--output", "-o", help="Directory to write."),
                        testbed: Path | None = TestbedOpt, inventory: Path | None = InventoryOpt) -> None:
    """UERANSIM v3.3.0 configs: gnb.yaml and ue-<group>.yaml (mode 0600: they hold K/OPc).

    With -i, what `testbed up --profile lab` uses: the gNB on the ran host's `gnb_address`, the AMF at the
    core host's `amf_ngap_address`. Without, a core and gNB on one host.

    Example: testbed render ueransim -i inventory.yml -o rendered/ueransim
    """
    _render("ueransim", outdir, testbed, inventory)


@ue_app.command("up")
def ue_up_cmd(group: str = typer.Argument(..., help="UE group name."), testbed: Path | None = TestbedOpt,
              timeout: float = typer.Option(30.0, "--timeout", help="Seconds to wait for the PDU sessions.")
              ) -> None:
    """Bring a UE group up: nr-ue on the lab profile (waits for each uesimtunN), the group's
    namespace on the local profile.

    Example: testbed ue up ai --timeout 60
    """
    # the RAN layer (jinja2, pydantic models): loaded only when this command runs (fast CLI start)
    from testbed.core.backend import state_dir
    from testbed.ran.ue import ue_up

    spec = _spec(testbed)
    with console.status(f"bringing up UE group {group}"):
        result = ue_up(spec, group, state_dir(spec), timeout_s=timeout)
    if result.namespace:
        console.print(f"UE group {group}: namespace {result.namespace}, addresses "
                      f"{', '.join(str(a) for a in result.addresses)}", highlight=False)
    else:
        console.print(f"UE group {group}: {len(result.interfaces)} PDU sessions up on "
                      f"{', '.join(result.interfaces)} (nr-ue pid {', '.join(map(str, result.pids))})",
                      highlight=False)


@ue_app.command("list")
def ue_list_cmd(testbed: Path | None = TestbedOpt, mongo_uri: str | None = MongoOpt,
                as_json: bool = JsonOpt) -> None:
    """Every UE of the testbed: IMSI, group, slice, address, provisioned, state.

    Example: testbed ue list --json
    """
    # the RAN layer and the store: loaded only when this command runs (fast CLI start)
    from testbed.core.backend import open_store, state_dir
    from testbed.ran.ue import ue_status

    spec = _spec(testbed)
    with open_store(spec, mongo_uri) as opened:
        rows = ue_status(spec, opened.store, state_dir(spec))
    if as_json:
        print(json.dumps([{"imsi": r.imsi, "group": r.group, "slice": r.slice,
                           "address": str(r.address) if r.address else None,
                           "provisioned": r.provisioned, "state": r.state} for r in rows], indent=2))
        return
    table = Table("IMSI", "group", "slice", "address", "provisioned", "state")
    for r in rows:
        table.add_row(r.imsi, r.group, r.slice, str(r.address or "-"), "yes" if r.provisioned else "no",
                      r.state)
    console.print(table)
