from __future__ import annotations

from pathlib import Path

import pytest

from testbed.config import load_testbed, parse_yaml, testbed_from_yaml
from testbed.errors import ConfigError

GOOD = """\
name: lab1
link:
  capacity_mbit: 100
slices:
  - name: ai
    sst: 1
    sd: "000001"
    subnet: 10.45.0.0/24
    guaranteed_mbit: 20
  - name: be
    sst: 2
    subnet: 10.46.0.0/24
ue_groups:
  - name: ai
    slice: ai
    count: 3
"""


def load(text: str):
    return testbed_from_yaml(parse_yaml(text, "tb.yaml"))


def with_link(*lines: str) -> str:
    """GOOD with these lines added to its `link:` block (after capacity_mbit, line 4 on)."""
    return GOOD.replace("  capacity_mbit: 100",
                        "\n".join(["  capacity_mbit: 100", *(f"  {line}" for line in lines)]))


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load(text)
    return [str(p) for p in exc.value.problems]


def test_good_file_loads_with_defaults():
    spec = load(GOOD)
    assert spec.name == "lab1"
    assert spec.slice("ai").sd == "000001"
    assert spec.slice("be").sd is None
    assert spec.slice("be").guaranteed_mbit == 0
    assert spec.link.slicing is True and spec.link.delay_ms == 0
    assert spec.groups_of("ai")[0].count == 3


def test_builtin_default_is_valid():
    spec = load_testbed()
    assert {s.name for s in spec.slices} == {"ai", "be"}
    assert sum(s.guaranteed_mbit for s in spec.slices) <= spec.link.capacity_mbit


def test_sd_accepts_0x_prefix_and_normalises_case():
    spec = load(GOOD.replace('sd: "000001"', 'sd: "0x00AbCd"'))
    assert spec.slice("ai").sd == "00abcd"


def test_wrong_type_names_line_and_field():
    [p] = problems(GOOD.replace("capacity_mbit: 100", "capacity_mbit: fast"))
    assert p.startswith("tb.yaml:3: link.capacity_mbit:")
    assert "number" in p


def test_unknown_key_names_its_line():
    [p] = problems(GOOD.replace("    count: 3", "    count: 3\n    colour: red"))
    assert p == "tb.yaml:17: ue_groups[0].colour: unknown key"


def test_bad_sd():
    [p] = problems(GOOD.replace('sd: "000001"', 'sd: "0x1G"'))
    assert p.startswith("tb.yaml:7: slices[0].sd:") and "6 hex digits" in p


def test_unquoted_sd_is_rejected_with_a_hint():
    [p] = problems(GOOD.replace('sd: "000001"', "sd: 000101"))  # YAML 1.1 octal -> 65
    assert "quoted" in p and p.startswith("tb.yaml:7:")


def test_sst_out_of_range():
    [p] = problems(GOOD.replace("sst: 2", "sst: 256"))
    assert p.startswith("tb.yaml:11: slices[1].sst:")


def test_overlapping_subnets():
    [p] = problems(GOOD.replace("10.46.0.0/24", "10.45.0.128/25"))
    assert p.startswith("tb.yaml:12: slices[1].subnet:") and "overlaps slices[0]" in p


def test_subnet_overlapping_data_network():
    [p] = problems(GOOD.replace("10.46.0.0/24", "10.200.0.0/16"))
    assert "data-network subnet" in p


def test_guarantees_above_capacity():
    [p] = problems(GOOD.replace("    subnet: 10.46.0.0/24", "    subnet: 10.46.0.0/24\n"
                                "    guaranteed_mbit: 81"))
    assert p.startswith("tb.yaml:13: slices[1].guaranteed_mbit:") and "101" in p


def test_duplicate_slice_names():
    ps = problems(GOOD.replace("name: be", "name: ai"))
    assert any(p.startswith("tb.yaml:10: slices[1].name: duplicate slice name") for p in ps)


def test_duplicate_yaml_key():
    [p] = problems(GOOD.replace("    count: 3", "    count: 3\n    count: 4"))
    assert p == "tb.yaml:17: ue_groups[0].count: duplicate key"


def test_group_of_unknown_slice():
    [p] = problems(GOOD.replace("    slice: ai", "    slice: video"))
    assert p.startswith("tb.yaml:15: ue_groups[0].slice: no slice named 'video'")


def test_too_many_ues_for_subnet():
    [p] = problems(GOOD.replace("10.45.0.0/24", "10.45.0.0/30"))
    assert "room for 1 UEs" in p


def test_ceiling_below_guarantee():
    [p] = problems(GOOD.replace("    guaranteed_mbit: 20", "    guaranteed_mbit: 20\n"
                                "    ceiling_mbit: 10"))
    assert "below the guarantee" in p


def test_invalid_yaml_syntax_names_line():
    [p] = problems("slices:\n  - name: [unclosed\n")
    assert p.startswith("tb.yaml:") and "invalid YAML" in p


def test_missing_file(tmp_path: Path):
    with pytest.raises(ConfigError) as exc:
        load_testbed(tmp_path / "nope.yaml")
    assert "cannot read" in str(exc.value)


def test_missing_required_field():
    [p] = problems(GOOD.replace("    subnet: 10.46.0.0/24\n", ""))
    assert p.startswith("tb.yaml:10: slices[1].subnet: required field is missing")


def test_per_direction_capacity_defaults_to_capacity():
    spec = load(with_link("downlink_mbit: 400"))
    assert spec.link.rate_mbit("downlink") == 400
    assert spec.link.rate_mbit("uplink") == 100
    assert spec.link.narrowest_mbit == 100


def test_guarantees_must_fit_the_narrower_direction():
    [p] = problems(with_link("uplink_mbit: 15"))
    assert "slices[0].guaranteed_mbit" in p and "above the link capacity 15" in p


def test_per_direction_capacity_must_be_positive():
    [p] = problems(with_link("uplink_mbit: 0"))
    assert p.startswith("tb.yaml:4: link.uplink_mbit:")


def test_flow_queues_must_be_a_power_of_two():
    [p] = problems(with_link("flow_queues: 100"))
    assert p.startswith("tb.yaml:4: link.flow_queues:") and "power of two" in p
    assert load(with_link("flow_queues: 256")
                ).link.flow_queues == 256


def test_flow_queue_packets_sets_each_flow_queue_and_needs_flow_queues():
    with_fq = with_link("flow_queues: 256", "flow_queue_packets: 30")
    assert load(with_fq).link.flow_queue_limit == 30
    assert load(GOOD).link.flow_queue_limit == 100  # deep: no tail unless asked for
    [p] = problems(with_link("flow_queue_packets: 30"))
    assert p.startswith("tb.yaml:4: link.flow_queue_packets:") and "needs flow_queues" in p
    [p] = problems(with_fq.replace("flow_queue_packets: 30", "flow_queue_packets: 1"))
    assert p.startswith("tb.yaml:5: link.flow_queue_packets:")


def test_flow_queue_bytes_is_one_limit_in_bytes_at_the_tail_and_needs_flow_queues():
    with_fq = with_link("flow_queues: 256", "flow_queue_bytes: 30000")
    assert load(with_fq).link.flow_queue_bytes == 30000
    assert load(GOOD).link.flow_queue_bytes is None
    [p] = problems(with_link("flow_queue_bytes: 30000"))
    assert p.startswith("tb.yaml:4: link.flow_queue_bytes:") and "needs flow_queues" in p
    [p] = problems(with_fq.replace("  flow_queue_bytes", "  flow_queue_packets: 20\n  flow_queue_bytes"))
    assert p.startswith("tb.yaml:6: link.flow_queue_bytes:") and "not both" in p
    [p] = problems(with_fq.replace("  flow_queue_bytes", "  flow_queue_drop: head\n  flow_queue_bytes"))
    assert p.startswith("tb.yaml:6: link.flow_queue_bytes:") and "tail only" in p
    [p] = problems(with_fq.replace("30000", "1000"))  # less than one full frame
    assert p.startswith("tb.yaml:5: link.flow_queue_bytes:")


def test_flow_queue_sets_are_per_slice_or_per_class_and_need_flow_queues():
    with_fq = with_link("flow_queues: 256", "flow_queue_sets: per-slice")
    assert load(with_fq).link.flow_queue_sets == "per-slice"
    assert load(GOOD).link.flow_queue_sets == "per-class"
    [p] = problems(with_link("flow_queue_sets: per-slice"))
    assert p.startswith("tb.yaml:4: link.flow_queue_sets:") and "needs flow_queues" in p
    [p] = problems(with_fq.replace("per-slice", "per-ue"))
    assert p.startswith("tb.yaml:5: link.flow_queue_sets:")


def test_flow_queue_drop_is_tail_or_head():
    base = with_link("flow_queues: 4", "flow_queue_drop: head")
    assert load(base).link.flow_queue_drop == "head"
    assert load(GOOD).link.flow_queue_drop == "tail"
    [p] = problems(base.replace("flow_queue_drop: head", "flow_queue_drop: middle"))
    assert p.startswith("tb.yaml:5: link.flow_queue_drop:") and "'tail' or 'head'" in p
    [p] = problems(with_link("flow_queue_drop: head"))
    assert p.startswith("tb.yaml:4: link.flow_queue_drop:") and "needs flow_queues" in p


def test_a_5qi_the_standard_does_not_define_is_one_line_naming_file_line_and_field():
    [p] = problems(GOOD.replace("    count: 3", "    count: 3\n    five_qi: 11"))
    assert p.startswith("tb.yaml:17: ue_groups[0].five_qi: 5QI 11 is not a standardized 5QI of "
                        "3GPP TS 23.501 Table 5.7.4-1")
    assert "\n" not in p
    assert load(GOOD.replace("    count: 3", "    count: 3\n    five_qi: 82")).ue_groups[0].five_qi == 82
