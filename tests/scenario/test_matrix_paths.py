"""Dotted `matrix:` paths: any field of the scenario or of its resolved testbed, list items by name
or index, checked at load with one line naming the segment that names nothing."""

from __future__ import annotations

import pytest

from testbed.errors import ConfigError
from testbed.scenario.load import parse_scenario
from testbed.scenario.matrix import expand

BASE = """\
name: t
duration_s: 30
services:
  - name: imgcls
    replicas: 2
  - name: tts
    replicas: 1
clients:
  - service: imgcls
    ue_group: ai
    rate: 30
  - service: tts
    ue_group: ai
    rate: 4
matrix:
  {key}: {values}
"""
KEY_LINE = 16  # the line of `{key}:` in BASE


def cells(key: str, values: str) -> list:
    loaded = parse_scenario(BASE.format(key=key, values=values), "scn.yaml")
    return expand(loaded.scenario, loaded.testbed)


def problems(key: str, values: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_scenario(BASE.format(key=key, values=values), "scn.yaml")
    return [str(p) for p in exc.value.problems]


@pytest.mark.parametrize("key", ["testbed.slices.ai.guaranteed_mbit",
                                 "testbed.slices.0.guaranteed_mbit"])
def test_slice_guarantee_by_name_and_by_index(key: str):
    got = cells(key, "[10, 20]")
    assert [c.testbed.slice("ai").guaranteed_mbit for c in got] == [10, 20]
    assert [c.params for c in got] == [{key: 10}, {key: 20}]
    # the other slice keeps its own
    assert {c.testbed.slice("be").guaranteed_mbit for c in got} == {
        got[0].testbed.slice("be").guaranteed_mbit}


def test_link_capacity():
    got = cells("testbed.link.capacity_mbit", "[50, 200]")
    assert [c.testbed.link.capacity_mbit for c in got] == [50, 200]


def test_client_rate_by_index():
    got = cells("clients.0.rate", "[5, 60]")
    assert [c.scenario.clients[0].rate for c in got] == [5, 60]
    assert {c.scenario.clients[1].rate for c in got} == {4}


@pytest.mark.parametrize("key", ["services.tts.replicas", "services.1.replicas",
                                 "services[1].replicas"])
def test_service_replicas_by_name_and_index(key: str):
    got = cells(key, "[1, 3]")
    assert [c.scenario.services[1].replicas for c in got] == [1, 3]
    assert {c.scenario.services[0].replicas for c in got} == {2}


def test_top_level_field_not_among_the_old_aliases():
    assert [c.scenario.warmup_s for c in cells("warmup_s", "[0, 60]")] == [0, 60]


@pytest.mark.parametrize("key, segment, exists", [
    ("testbed.slices.ai.guaranted_mbit", "'guaranted_mbit' names nothing in testbed.slices.ai",
     "guaranteed_mbit"),
    ("testbed.slices.video.guaranteed_mbit", "'video' names nothing in testbed.slices",
     "items: ai, be or index 0-1"),
    ("services.chatbot.replicas", "'chatbot' names nothing in services",
     "items: imgcls, tts or index 0-1"),
    ("clients.5.rate", "'5' names nothing in clients", "index 0-1"),
    ("testbed.link.capacity", "'capacity' names nothing in testbed.link", "capacity_mbit"),
    ("colour", "'colour' names nothing in the scenario", "aliases: slicing"),
])
def test_a_path_that_names_nothing_is_one_line_with_file_and_line(key: str, segment: str,
                                                                  exists: str):
    ps = problems(key, "[1]")
    assert len(ps) == 1, ps
    head = f"scn.yaml:{KEY_LINE}: matrix.{key}: {segment} ("
    assert ps[0].startswith(head), ps[0]
    assert exists in ps[0]


def test_a_field_read_once_per_run_cannot_vary():
    ps = problems("repetitions", "[1, 2]")
    assert len(ps) == 1 and "read once per run" in ps[0]


def test_values_of_a_dotted_path_are_validated():
    ps = problems("services.imgcls.replicas", "[2, 0]")
    assert len(ps) == 1
    assert ps[0].startswith(f"scn.yaml:{KEY_LINE}: matrix.services.imgcls.replicas[1]: value 0 "
                            "does not fit: services.0.replicas:")


def test_a_path_by_name_runs_before_the_service_alias_drops_items():
    text = BASE.format(key="services.tts.replicas", values="[1, 3]") + "  service: [imgcls, tts]\n"
    loaded = parse_scenario(text, "scn.yaml")
    got = expand(loaded.scenario, loaded.testbed)
    assert [c.label for c in got][:2] == ["services.tts.replicas=1, service=imgcls",
                                          "services.tts.replicas=1, service=tts"]
    assert [s.name for s in got[0].scenario.services] == ["imgcls"]
    assert got[3].scenario.services[0].replicas == 3 and got[3].scenario.services[0].name == "tts"
