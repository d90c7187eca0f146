"""UERANSIM configs: parse, sd as an integer, and agree with the subscriber store."""

from __future__ import annotations

import stat

import yaml

from testbed.config import parse_yaml
from testbed.config import testbed_from_yaml as spec_of_yaml
from testbed.core.backend import embedded_collection
from testbed.core.provision import desired_ues
from testbed.core.store import SubscriberStore
from testbed.ran.render import render_ueransim, ueransim_files

SPEC = """
name: r
slices:
  - {name: ai, sst: 1, sd: "000080", subnet: 10.45.0.0/24}
  - {name: iot, sst: 3, dnn: iot, subnet: 10.47.0.0/24}
ue_groups:
  - {name: ai, slice: ai, count: 3}
  - {name: iot, slice: iot, count: 2, imsi_start: "999700000000100", session_type: ipv4v6}
core: {mcc: "999", mnc: "70", tac: 5, amf_address: 10.0.0.5, gnb_address: 10.0.0.9}
"""


def _spec():
    return spec_of_yaml(parse_yaml(SPEC, "r.yaml"))


def test_gnb_has_plmn_tac_amf_and_every_slice_with_integer_sd():
    text = ueransim_files(_spec())["gnb.yaml"]
    gnb = yaml.safe_load(text)
    assert (gnb["mcc"], gnb["mnc"], gnb["tac"]) == ("999", "70", 5)
    assert gnb["amfConfigs"] == [{"address": "10.0.0.5", "port": 38412}]
    assert gnb["ngapIp"] == gnb["gtpIp"] == "10.0.0.9"
    assert gnb["slices"] == [{"sst": 1, "sd": 0x80}, {"sst": 3}]
    assert "sd: 0x000080" in text  # never a bare 000080 (UERANSIM would read decimal 80)


def test_ue_configs_agree_with_the_store(tmp_path):
    spec = _spec()
    collection, client = embedded_collection(tmp_path / "db")
    try:
        store = SubscriberStore(collection)
        store.apply(desired_ues(spec))
        written = render_ueransim(spec, tmp_path / "u")
        assert sorted(p.name for p in written) == ["gnb.yaml", "ue-ai.yaml", "ue-iot.yaml"]
        for g in spec.ue_groups:
            path = tmp_path / "u" / f"ue-{g.name}.yaml"
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            ue = yaml.safe_load(path.read_text())
            first = int(ue["supi"].removeprefix("imsi-"))
            imsis = [str(first + i).zfill(15) for i in range(g.count)]  # what nr-ue -n starts
            for imsi in imsis:
                sub = store.get(imsi)
                assert sub is not None, f"{imsi} started by nr-ue is not provisioned"
                assert ue["key"] == sub.security.k and ue["op"] == sub.security.opc
                assert ue["opType"] == "OPC" and ue["amf"] == sub.security.amf
                entry = sub.slice[0]
                want = {"sst": entry.sst} | ({"sd": int(entry.sd, 16)} if entry.sd else {})
                assert ue["configured-nssai"] == ue["default-nssai"] == [want]
                (session,) = ue["sessions"]
                assert session["slice"] == want and session["apn"] == entry.session[0].name
            assert (ue["mcc"], ue["mnc"]) == ("999", "70")
        iot = yaml.safe_load((tmp_path / "u" / "ue-iot.yaml").read_text())
        assert iot["supi"] == "imsi-999700000000100" and iot["sessions"][0]["type"] == "IPv4v6"
    finally:
        client.close()
