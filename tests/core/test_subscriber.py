"""The subscriber document model and what the spec provisions."""

from __future__ import annotations

import pytest

from testbed.core.provision import derive_keys, desired_ues
from testbed.core.subscriber import Bitrate, Subscriber, mask
from tests.core.core_specs import THREE_SLICES, spec_from


def test_document_has_the_open5gs_shape(spec):
    doc = desired_ues(spec)[0].subscriber.to_document()
    assert set(doc) >= {"imsi", "security", "ambr", "slice", "schema_version", "msisdn", "imeisv",
                        "access_restriction_data", "network_access_mode", "subscribed_rau_tau_timer"}
    assert doc["imsi"] == "001010000000001"
    assert set(doc["security"]) == {"k", "opc", "amf", "sqn"}
    assert doc["security"]["amf"] == "8000"
    (entry,) = doc["slice"]
    assert entry == {**entry, "sst": 1, "sd": "000001", "default_indicator": True}
    (session,) = entry["session"]
    assert session["name"] == "internet" and session["type"] == 1
    assert session["qos"] == {"index": 9, "arp": {"priority_level": 8, "pre_emption_capability": 1,
                                                  "pre_emption_vulnerability": 2}}
    assert session["ambr"]["downlink"] == {"value": 1, "unit": 3}  # 1000 Mbit/s = 1 Gbps
    assert session["ue"] == {"addr": "10.45.0.2"}
    assert Subscriber.from_document(doc).to_document() == doc


def test_group_fields_reach_the_document():
    ues = desired_ues(spec_from(THREE_SLICES))
    by_group = {u.group: u for u in reversed(ues)}
    ai = by_group["ai"].subscriber
    assert ai.security.k == "000102030405060708090a0b0c0d0e0f"
    assert ai.slice[0].session[0].qos.index == 7
    assert str(ai.ambr.downlink) == "20 Mbps"
    be = by_group["be"]
    assert be.imsi == "001010000000500" and be.subscriber.slice[0].session[0].type == 3
    iot = by_group["iot"].subscriber
    assert iot.slice[0].sd is None and "sd" not in iot.to_document()["slice"][0]
    assert iot.slice[0].session[0].name == "iot" and iot.address is None


def test_keys_are_derived_deterministically_per_group():
    a = derive_keys("seed", "001010000000001")
    assert a == derive_keys("seed", "001010000000001")
    assert a != derive_keys("seed", "001010000001001") != derive_keys("other", "001010000000001")
    assert len(a.k) == len(a.opc) == 32 and int(a.k, 16) >= 0 and a.k != a.opc
    ues = desired_ues(spec_from(THREE_SLICES))
    be_keys = {u.subscriber.security.k for u in ues if u.group == "be"}
    assert len(be_keys) == 1  # nr-ue -n needs one key for the whole group


@pytest.mark.parametrize(("mbit", "value", "unit"), [(1000, 1, 3), (20, 20, 2), (0.5, 500, 1),
                                                     (1.5, 1500, 1), (2500, 2500, 2)])
def test_bitrate_picks_the_largest_integer_unit(mbit, value, unit):
    b = Bitrate.from_mbit(mbit)
    assert (b.value, b.unit) == (value, unit) and b.bps == round(mbit * 1e6)


def test_masked_document_hides_keys(spec):
    sub = desired_ues(spec)[0].subscriber
    text = str(sub.masked())
    assert sub.security.k not in text and sub.security.opc not in text
    assert mask(sub.security.k) in text and mask("a" * 32) != mask("b" * 32)
