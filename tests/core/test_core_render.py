"""Open5GS configs: parse, carry every slice, agree with the subscriber store."""

from __future__ import annotations

import ipaddress
import stat

import yaml

from testbed.core.provision import desired_ues
from testbed.core.render import open5gs_files, render_open5gs
from tests.core.core_specs import THREE_SLICES, spec_from


def _snssai(d):
    return (d["sst"], d.get("sd"))


def test_every_file_parses_and_amf_nssf_carry_every_slice():
    spec = spec_from(THREE_SLICES)
    files = {n: yaml.safe_load(t) for n, t in open5gs_files(spec).items() if n.endswith(".yaml")}
    want = {(1, "000001"), (1, "000002"), (3, None)}
    amf = files["amf.yaml"]["amf"]
    (plmn,) = amf["plmn_support"]
    assert plmn["plmn_id"] == {"mcc": "001", "mnc": "01"}  # strings: the mnc's length survives
    assert {_snssai(s) for s in plmn["s_nssai"]} == want
    assert amf["tai"][0]["tac"] == 7 and amf["ngap"]["server"][0]["address"] == "127.0.0.5"
    nsi = files["nssf.yaml"]["nssf"]["sbi"]["client"]["nsi"]
    assert len(nsi) == 3 and {_snssai(n["s_nssai"]) for n in nsi} == want
    assert all(isinstance(n["s_nssai"], dict) for n in nsi)  # a mapping, not a list


def test_one_smf_and_upf_per_slice_with_its_own_subnet_and_tun():
    spec = spec_from(THREE_SLICES)
    files = {n: yaml.safe_load(t) for n, t in open5gs_files(spec).items() if n.endswith(".yaml")}
    devs, upf_addresses = set(), set()
    for s in spec.slices:
        smf = files[f"smf-{s.name}.yaml"]["smf"]
        upf = files[f"upf-{s.name}.yaml"]["upf"]
        (info,) = smf["info"][0]["s_nssai"]
        assert _snssai(info) == s.snssai and info["dnn"] == [s.dnn]
        assert smf["session"] == [{"subnet": str(s.subnet), "gateway": str(s.gateway), "dnn": s.dnn}]
        (client,) = smf["pfcp"]["client"]["upf"]
        assert client["address"] == upf["pfcp"]["server"][0]["address"]
        (session,) = upf["session"]
        assert ipaddress.ip_network(session["subnet"]) == s.subnet
        devs.add(session["dev"])
        upf_addresses.add(client["address"])
    assert len(devs) == len(upf_addresses) == 3 and "ogstun" in devs


def test_compose_file_is_structurally_valid():
    spec = spec_from(THREE_SLICES)
    files = open5gs_files(spec)
    compose = yaml.safe_load(files["compose.yaml"])
    services = compose["services"]
    assert {"nrf", "scp", "amf", "nssf", "udr", "udm", "ausf", "pcf", "bsf", "mongo",
            "tun-setup"} <= set(services)
    for s in spec.slices:
        assert services[f"upf-{s.name}"]["cap_add"] == ["NET_ADMIN"]
    for name, svc in services.items():
        assert svc["network_mode"] == "host" and "image" in svc
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown {dep}"
        cmd = svc.get("command", [])
        if name not in ("mongo", "tun-setup"):
            assert svc["entrypoint"][0].startswith("open5gs-") and cmd[0] == "-c"
            assert cmd[1].rsplit("/", 1)[1] in files  # every config it names is rendered
    for dev in ("ogstun", "ogstun2", "ogstun3"):
        assert f"ip tuntap add name {dev} mode tun" in files["tun-setup.sh"]


def test_render_agrees_with_the_store(store, tmp_path):
    spec = spec_from(THREE_SLICES)
    store.apply(desired_ues(spec))
    render_open5gs(spec, tmp_path / "o")
    amf = yaml.safe_load((tmp_path / "o" / "amf.yaml").read_text())["amf"]
    in_amf = {_snssai(s) for s in amf["plmn_support"][0]["s_nssai"]}
    in_store = {n for sub in store.list() for n in sub.snssais}
    assert in_store == in_amf
    for sub in store.list():
        sl = next(s for s in spec.slices if s.snssai == sub.snssais[0])
        smf = yaml.safe_load((tmp_path / "o" / f"smf-{sl.name}.yaml").read_text())["smf"]
        assert sub.slice[0].session[0].name in smf["info"][0]["s_nssai"][0]["dnn"]
        if sub.address is not None:
            assert sub.address in ipaddress.ip_network(smf["session"][0]["subnet"])
    assert stat.S_IMODE((tmp_path / "o" / "udr.yaml").stat().st_mode) == 0o600
