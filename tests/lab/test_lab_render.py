"""The lab's Open5GS/UERANSIM configs: every address a host reaches on another host comes from
the inventory and is never loopback or unset; bad addresses are one error line, nothing written."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from testbed.cli import main
from testbed.config import load_testbed
from testbed.errors import ConfigError
from testbed.lab.bringup import lab_up
from testbed.lab.inventory import LabInventory
from testbed.lab.render import check_rendered, peer_addresses

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "playbooks" / "inventory.example.yml"

# Who reaches which address: (rendered file pattern, key path ("*": every item of a list),
# the role whose host owns the address, the role whose host connects to it). Where the roles
# run is read from playbooks/site.yml, not assumed here.
PEER_KEYS: list[tuple[str, tuple[str, ...], str, str]] = [
    ("open5gs/amf.yaml", ("amf", "ngap", "server", "*"), "open5gs", "ueransim"),  # N2
    ("open5gs/upf-*.yaml", ("upf", "gtpu", "server", "*"), "upf", "ueransim"),  # N3 uplink
    ("open5gs/upf-*.yaml", ("upf", "pfcp", "server", "*"), "upf", "open5gs"),  # N4 from the SMF
    ("open5gs/smf-*.yaml", ("smf", "pfcp", "client", "upf", "*"), "upf", "open5gs"),
    ("ueransim/gnb.yaml", ("amfConfigs", "*"), "open5gs", "ueransim"),
    ("ueransim/gnb.yaml", ("ngapIp",), "ueransim", "open5gs"),  # the AMF answers it
    ("ueransim/gnb.yaml", ("gtpIp",), "ueransim", "upf"),  # N3 downlink
    ("ueransim/gnb.yaml", ("linkIp",), "ueransim", "ueransim"),  # UEs' radio link
    ("ueransim/ue-*.yaml", ("gnbSearchList", "*"), "ueransim", "ueransim"),
]


def _walk(doc: Any, path: tuple[str, ...]) -> list[Any]:
    """Every value at `path`; a missing key gives none."""
    if not path:
        return [doc]
    head, rest = path[0], path[1:]
    if head == "*":
        return [v for item in (doc if isinstance(doc, list) else []) for v in _walk(item, rest)]
    return _walk(doc[head], rest) if isinstance(doc, dict) and head in doc else []


def _reached(value: Any) -> Any:
    """The address a peer uses: a server entry's `advertise` when it has one, else `address`."""
    if isinstance(value, dict):
        return value.get("advertise", value.get("address"))
    return value


def role_hosts(inventory: LabInventory) -> dict[str, set[str]]:
    """Role -> the inventory hosts site.yml runs it on."""
    out: dict[str, set[str]] = {}
    for play in yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text()):
        hosts = {h for group in play["hosts"].split(":") for h in inventory.hosts(group)}
        for role in play.get("roles", []):
            name = role if isinstance(role, str) else role["role"]
            out.setdefault(name, set()).update(hosts)
    return out


def peer_problems(rendered: Path, placement: dict[str, set[str]]) -> list[str]:
    """Addresses another host must reach that are unset, not IP addresses or loopback, and N3
    address/port pairs that two UPFs share."""
    problems: list[str] = []
    for pattern, path, owner, user in PEER_KEYS:
        files = sorted(rendered.glob(pattern))
        if not files:
            problems.append(f"{pattern}: not rendered")
        remote = placement[owner] != placement[user] or len(placement[owner]) > 1
        for f in files:
            where = f"{f.relative_to(rendered)}: {'.'.join(path)}"
            values = [_reached(v) for v in _walk(yaml.safe_load(f.read_text()), path)]
            if not values or any(v in (None, "") for v in values):
                problems.append(f"{where}: unset")
                continue
            for v in values:
                try:
                    address = ipaddress.ip_address(str(v))
                except ValueError:
                    problems.append(f"{where}: {v!r} is not an IP address")
                    continue
                if remote and (address.is_loopback or address.is_unspecified):
                    problems.append(f"{where}: {v} is reached from another host")
    n3 = [(str(_reached(s)), int(s.get("port", 2152)))
          for f in sorted(rendered.glob("open5gs/upf-*.yaml"))
          for s in _walk(yaml.safe_load(f.read_text()), ("upf", "gtpu", "server", "*"))]
    problems += [f"N3 {a}:{p} is shared by UPFs" for a, p in set(n3) if n3.count((a, p)) > 1]
    return problems


def _render(tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "rendered"
    for part in ("open5gs", "ueransim"):
        assert main(["render", part, *extra, "-o", str(out / part)]) == 0
    return out


def test_example_inventory_renders_no_loopback_or_unset_peer_address(tmp_path: Path) -> None:
    rendered = _render(tmp_path, "-i", str(EXAMPLE))
    inventory = LabInventory.load(EXAMPLE)
    placement = role_hosts(inventory)
    assert placement["upf"] == placement["open5gs"] == {"core1"}
    assert placement["ueransim"] == {"ran1"}
    assert peer_problems(rendered, placement) == []
    # and the two ends agree: the gNB dials the AMF's NGAP address, each SMF its own UPF
    amf = yaml.safe_load((rendered / "open5gs" / "amf.yaml").read_text())
    gnb = yaml.safe_load((rendered / "ueransim" / "gnb.yaml").read_text())
    assert [c["address"] for c in gnb["amfConfigs"]] == \
        [s["address"] for s in amf["amf"]["ngap"]["server"]] == ["192.168.10.10"]
    n3 = {}
    for name in ("ai", "be"):
        upf = yaml.safe_load((rendered / "open5gs" / f"upf-{name}.yaml").read_text())["upf"]
        smf = yaml.safe_load((rendered / "open5gs" / f"smf-{name}.yaml").read_text())["smf"]
        assert smf["pfcp"]["client"]["upf"][0]["address"] == upf["pfcp"]["server"][0]["address"]
        n3[name] = upf["gtpu"]["server"][0]["address"]
    assert n3 == {"ai": "192.168.10.11", "be": "192.168.10.12"}  # the inventory's, per slice
    assert gnb["gtpIp"] == gnb["ngapIp"] == "192.168.10.20"


def test_the_check_finds_loopback_unset_and_shared_addresses(tmp_path: Path) -> None:
    """The single-host render (no inventory) puts N2 and N3 on loopback: the check says so."""
    rendered = _render(tmp_path)
    placement = role_hosts(LabInventory.load(EXAMPLE))
    problems = peer_problems(rendered, placement)
    assert "open5gs/amf.yaml: amf.ngap.server.*: 127.0.0.5 is reached from another host" in problems
    assert "open5gs/upf-ai.yaml: upf.gtpu.server.*: 127.0.7.1 is reached from another host" \
        in problems
    assert "ueransim/gnb.yaml: gtpIp: 127.0.0.1 is reached from another host" in problems
    upf = rendered / "open5gs" / "upf-be.yaml"
    doc = yaml.safe_load(upf.read_text())
    doc["upf"]["gtpu"]["server"][0]["address"] = "127.0.7.1"  # ai's too
    del doc["upf"]["pfcp"]
    upf.write_text(yaml.safe_dump(doc))
    problems = peer_problems(rendered, placement)
    assert "N3 127.0.7.1:2152 is shared by UPFs" in problems
    assert "open5gs/upf-be.yaml: upf.pfcp.server.*: unset" in problems
    # PFCP between the SMF and the UPF stays on one host: loopback is right there...
    assert not [p for p in problems if "pfcp" in p and "reached from another host" in p]
    # ...until the UPF runs elsewhere
    moved = {**placement, "upf": {"other"}}
    assert "open5gs/smf-ai.yaml: smf.pfcp.client.upf.*: 127.0.7.1 is reached from another host" \
        in peer_problems(rendered, moved)


# (case, edit of the example inventory's text, field, words in the message)
N3 = "          upf_n3_address:\n            ai: 192.168.10.11\n            be: 192.168.10.12\n"
BAD: list[tuple[str, tuple[str, str], str, str]] = [
    ("no upf_n3_address", (N3, ""),
     "all.children.core.hosts.core1.upf_n3_address", "missing: the GTP-U (N3) address"),
    ("loopback n3", ("ai: 192.168.10.11", "ai: 127.0.0.1"),
     "all.children.core.hosts.core1.upf_n3_address.ai", "127.0.0.1 is loopback"),
    ("one loopback n3", (N3, "          upf_n3_address: 127.0.0.1\n"),
     "all.children.core.hosts.core1.upf_n3_address", "127.0.0.1 is loopback"),
    ("one n3 for two upfs", (N3, "          upf_n3_address: 192.168.10.11\n"),
     "all.children.core.hosts.core1.upf_n3_address", "one address for 2 UPFs"),
    ("two upfs share one n3", ("be: 192.168.10.12", "be: 192.168.10.11"),
     "all.children.core.hosts.core1.upf_n3_address.be",
     "192.168.10.11 is also the N3 address of slice 'ai'"),
    ("n3 for no slice", ("be: 192.168.10.12", "be: 192.168.10.12\n            iot: 192.168.10.13"),
     "all.children.core.hosts.core1.upf_n3_address.iot", "no slice 'iot'"),
    ("n3 missing a slice", ("            be: 192.168.10.12\n", ""),
     "all.children.core.hosts.core1.upf_n3_address", "no N3 address for slice 'be'"),
    ("n3 not an address", ("ai: 192.168.10.11", "ai: core1.lab.example"),
     "all.children.core.hosts.core1.upf_n3_address.ai", "'core1.lab.example' is not an IPv4"),
    ("no amf_ngap_address", ("          amf_ngap_address: 192.168.10.10\n", ""),
     "all.children.core.hosts.core1.amf_ngap_address", "missing: the AMF's NGAP (N2) address"),
    ("unspecified amf", ("amf_ngap_address: 192.168.10.10", "amf_ngap_address: 0.0.0.0"),
     "all.children.core.hosts.core1.amf_ngap_address", "0.0.0.0 is unspecified"),
    ("multicast amf", ("amf_ngap_address: 192.168.10.10", "amf_ngap_address: 224.0.0.5"),
     "all.children.core.hosts.core1.amf_ngap_address", "224.0.0.5 is multicast"),
    ("no gnb_address", ("          gnb_address: 192.168.10.20", "          # none"),
     "all.children.ran.hosts.ran1.gnb_address", "missing: the gNB's N2/N3 address"),
    ("loopback gnb", ("gnb_address: 192.168.10.20", "gnb_address: 127.0.0.1"),
     "all.children.ran.hosts.ran1.gnb_address", "127.0.0.1 is loopback"),
    ("gnb on an n3 address", ("gnb_address: 192.168.10.20", "gnb_address: 192.168.10.12"),
     "all.children.ran.hosts.ran1.gnb_address", "also the N3 address of slice 'be'"),
    ("gnb on the amf address", ("gnb_address: 192.168.10.20", "gnb_address: 192.168.10.10"),
     "all.children.ran.hosts.ran1.gnb_address", "also the AMF's NGAP address"),
]


def _bad_inventory(tmp_path: Path, old: str, new: str) -> tuple[Path, str]:
    text = EXAMPLE.read_text()
    assert old in text, old
    text = text.replace(old, new, 1)
    inv = tmp_path / "inventory.yml"
    inv.write_text(text)
    return inv, text


def _line_of(text: str, field: str) -> int:
    """The line the error must name: the key's own, else its host's (when the key is missing)."""
    parts = field.split(".")
    for key in (parts[-1], parts[-2]):
        hits = [i + 1 for i, line in enumerate(text.splitlines()) if line.strip().startswith(f"{key}:")]
        if hits:
            return hits[0]
    raise AssertionError(field)


@pytest.mark.parametrize(("edit", "field", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
@pytest.mark.parametrize("part", ["open5gs", "ueransim"])
def test_bad_inventory_is_one_line_naming_file_line_field_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], part: str, edit: tuple[str, str],
        field: str, words: str) -> None:
    inv, text = _bad_inventory(tmp_path, *edit)
    out = tmp_path / "out" / part
    assert main(["render", part, "-i", str(inv), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"{inv}:{_line_of(text, field)}: {field}: " in err[0] and words in err[0], err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("edit", "field", "words"),
                         [BAD[1][1:], BAD[3][1:]], ids=[BAD[1][0], BAD[3][0]])
def test_lab_up_refuses_bad_addresses_before_making_its_run_dir(
        tmp_path: Path, edit: tuple[str, str], field: str, words: str) -> None:
    inv, _ = _bad_inventory(tmp_path, *edit)
    with pytest.raises(ConfigError, match=words) as err:
        lab_up(load_testbed(), inv, check=True, run_dir=tmp_path / "run",
               console=Console(file=open("/dev/null", "w")))  # noqa: SIM115
    assert err.value.problems[0].field == field
    assert not (tmp_path / "run").exists()


def test_single_slice_takes_one_n3_address(tmp_path: Path) -> None:
    spec = tmp_path / "one.yaml"
    spec.write_text("name: one\nslices:\n  - {name: ai, sst: 1, subnet: 10.45.0.0/24}\n"
                    "ue_groups:\n  - {name: ai, slice: ai, count: 1}\n")
    inv, _ = _bad_inventory(tmp_path, N3, "          upf_n3_address: 192.168.10.11\n")
    rendered = _render(tmp_path, "-i", str(inv), "-t", str(spec))
    upf = yaml.safe_load((rendered / "open5gs" / "upf-ai.yaml").read_text())["upf"]
    assert upf["gtpu"]["server"] == [{"address": "192.168.10.11", "port": 2152}]
    assert peer_problems(rendered, role_hosts(LabInventory.load(inv))) == []


def test_lab_up_refuses_a_render_whose_addresses_are_not_the_inventorys(tmp_path: Path) -> None:
    """`lab up --rendered DIR`: a one-host render (loopback N2/N3) or a hand-edited N3 address
    stops before the run directory exists, naming the rendered file, line and key."""
    spec, inventory = load_testbed(), LabInventory.load(EXAMPLE)
    good = _render(tmp_path / "good", "-i", str(EXAMPLE))
    check_rendered(good, peer_addresses(spec, inventory))  # the inventory's own render passes
    quiet = Console(file=open("/dev/null", "w"))  # noqa: SIM115
    one_host = _render(tmp_path / "one-host")
    with pytest.raises(ConfigError) as err:
        lab_up(spec, EXAMPLE, check=True, run_dir=tmp_path / "run", rendered_dir=one_host,
               console=quiet)
    (problem,) = err.value.problems
    amf_lines = (one_host / "open5gs" / "amf.yaml").read_text().splitlines()
    ngap = amf_lines.index("  ngap:")
    address_line = next(i + 1 for i in range(ngap, len(amf_lines)) if "address:" in amf_lines[i])
    assert (problem.file, problem.line, problem.field) == \
        (str(one_host / "open5gs" / "amf.yaml"), address_line, "amf.ngap.server[0].address")
    assert "127.0.0.5 is not the inventory's amf_ngap_address (192.168.10.10)" in problem.message
    upf = good / "open5gs" / "upf-be.yaml"
    upf.write_text(upf.read_text().replace("address: 192.168.10.12", "address: 192.168.10.11"))
    with pytest.raises(ConfigError, match=r"upf-be\.yaml:\d+: upf\.gtpu\.server\[0\]\.address: "
                       r"192\.168\.10\.11 is not the inventory's upf_n3_address of slice 'be'"):
        lab_up(spec, EXAMPLE, check=True, run_dir=tmp_path / "run", rendered_dir=good,
               console=quiet)
    assert not (tmp_path / "run").exists()
