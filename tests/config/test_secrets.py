"""Masking the key seed and given K/OPc in documents kept on disk, and loading them back."""

from __future__ import annotations

from testbed.config import TestbedSpec
from testbed.config.secrets import REDACTED, redact_scenario, redact_testbed, unredact_testbed
from testbed.scenario.spec import Scenario

K, OPC = "00112233445566778899aabbccddeeff", "ffeeddccbbaa99887766554433221100"


def _spec() -> TestbedSpec:
    return TestbedSpec.model_validate({
        "name": "x", "core": {"key_seed": "my-seed"},
        "slices": [{"name": "ai", "sst": 1, "subnet": "10.45.0.0/24"}],
        "ue_groups": [{"name": "a", "slice": "ai", "k": K, "opc": OPC},
                      {"name": "b", "slice": "ai"}]})


def test_masked_document_holds_no_secret_and_loads_back_with_defaults():
    doc = _spec().model_dump(mode="json")
    masked = redact_testbed(doc)
    text = str(masked)
    assert K not in text and OPC not in text and "my-seed" not in text
    assert masked["core"]["key_seed"] == REDACTED and masked["ue_groups"][0]["k"] == REDACTED
    assert masked["ue_groups"][1]["k"] is None  # nothing given, nothing to mask
    assert doc["core"]["key_seed"] == "my-seed"  # the input is untouched
    back = TestbedSpec.model_validate(unredact_testbed(masked))
    assert back.core.key_seed == "testbed"  # the default
    assert back.ue_groups[0].k is None and back.slices == _spec().slices


def test_a_scenarios_inline_testbed_is_masked_too():
    scn = {"name": "s", "duration_s": 1, "services": [{"name": "imgcls"}],
           "testbed": {"name": "x", "slices": [{"name": "ai", "sst": 1, "subnet": "10.45.0.0/24"}],
                       "ue_groups": [{"name": "a", "slice": "ai", "k": K, "opc": OPC}]}}
    masked = redact_scenario(Scenario.model_validate(scn).model_dump(mode="json"))
    assert K not in str(masked) and OPC not in str(masked)
    assert redact_scenario({"name": "s", "testbed": "tb.yaml"})["testbed"] == "tb.yaml"
