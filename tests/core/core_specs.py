"""Specs shared by the core tests."""

from __future__ import annotations

from testbed.config import parse_yaml, testbed_from_yaml
from testbed.config.testbed_spec import TestbedSpec


def spec_from(text: str) -> TestbedSpec:
    return testbed_from_yaml(parse_yaml(text, "t.yaml"))


THREE_SLICES = """
name: t3
slices:
  - {name: ai, sst: 1, sd: "000001", subnet: 10.45.0.0/24, guaranteed_mbit: 20}
  - {name: be, sst: 1, sd: "000002", subnet: 10.46.0.0/24}
  - {name: iot, sst: 3, dnn: iot, subnet: 10.47.0.0/24}
ue_groups:
  - {name: ai, slice: ai, count: 3, k: "000102030405060708090a0b0c0d0e0f",
     opc: "f0e0d0c0b0a090807060504030201000", ambr_downlink_mbit: 20, five_qi: 7}
  - {name: be, slice: be, count: 2, imsi_start: "001010000000500", session_type: ipv4v6}
  - {name: iot, slice: iot, count: 1, static_address: false}
core: {mcc: "001", mnc: "01", tac: 7, key_seed: unit-test}
"""
