"""A run compiled once: each cell's plan holds its clock, profiles and resolved policies, and a
policy name is resolved once for the whole run."""

import pickle
from pathlib import Path

import testbed.scaler.factory as factory
import testbed.scenario.cellplan as cellplan
from testbed.scaler.policies import RuleV2, StaticPolicy
from testbed.scenario.cellplan import RunCompiler
from testbed.scenario.load import parse_scenario
from testbed.scenario.matrix import expand

SWEPT = """name: swept
duration_s: 60
time_scale: 4
matrix:
  total_units: [6, 8, 10]
services:
  - {name: imgcls, policy: rule_v2}
  - {name: tts, policy: static}
  - {name: chatbot, policy: rule_v2}
"""


def test_each_policy_name_is_resolved_once_for_every_cell_and_repetition(tmp_path: Path, monkeypatch):
    loaded = parse_scenario(SWEPT, "swept.yaml", tmp_path)
    cells = expand(loaded.scenario, loaded.testbed)
    asked: list[str] = []
    real = cellplan.resolve
    monkeypatch.setattr(cellplan, "resolve", lambda name, **kw: asked.append(name) or real(name, **kw))

    def never(name, **kw):
        raise AssertionError(f"{name} resolved again while building")

    monkeypatch.setattr(factory, "resolve", never)
    plans = RunCompiler(tmp_path).plans(cells)
    built = [plan.policies(rep).policies for plan in plans for rep in range(2)]
    assert sorted(asked) == ["rule_v2", "static"]  # 3 cells x 2 repetitions x 3 services: 2 names
    assert all(isinstance(b["imgcls"], RuleV2) and isinstance(b["tts"], StaticPolicy) for b in built)
    assert len({id(b["imgcls"]) for b in built}) == 6  # fresh objects per repetition
    assert {p.clock.scale for p in plans} == {4.0}
    assert [p.scenario.total_units for p in plans] == [6, 8, 10]


def test_a_plan_sent_to_a_worker_process_compiles_its_cell_again(tmp_path: Path):
    loaded = parse_scenario(SWEPT, "swept.yaml", tmp_path)
    plan = RunCompiler(tmp_path).plan(expand(loaded.scenario, loaded.testbed)[1])
    back = pickle.loads(pickle.dumps(plan))
    assert back.scenario.total_units == 8 and back.choices == plan.choices
    assert back.profiles == plan.profiles and back.entries.keys() == plan.entries.keys()
