"""The policy registry: a user's class by `module:Class` through `sim eval` and a sim-engine
scenario, reading the newest window by name (`observe(window)`, `window.queue_length`); classes
added with `register_policy` and by installed packages (the entry-point loader); the rules'
thresholds from the profiles in use; and bad input as one line with a non-zero exit."""

from __future__ import annotations

import json
import re
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.errors import ConfigError
from testbed.profiles import ServiceProfile, default_profiles, paper
from testbed.profiles.parts import RuleThresholds
from testbed.scaler import registry
from testbed.scaler.factory import make_policy
from testbed.scaler.policies import RuleV1, RuleV2
from testbed.scaler.registry import register_policy, unregister_policy

MYPOL = '''\
SEEN = []  # (service, queue_length) of every window observed, in order


class QueuePolicy:
    """Scale up while requests wait at the window's end, else hold."""

    def __init__(self, service):
        self.service = service
        self.window = None

    def observe(self, window):
        self.window = window
        SEEN.append((self.service, window.queue_length))

    def act(self, observation, action_mask):
        return 3 if self.window.queue_length > 0 else 2
'''
# 100 requests a second for 10 minutes: far beyond one imgcls replica
TRACE = "30 3000\n" * 20


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's folder holding mypol.py and a trace, as the working directory; the modules it
    defines are forgotten afterwards (each test imports its own)."""
    (tmp_path / "mypol.py").write_text(MYPOL)
    (tmp_path / "t.txt").write_text(TRACE)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in ("mypol", "broken", "noact", "wild"):
        sys.modules.pop(name, None)


def _eval(policy: str) -> list[str]:
    return ["sim", "eval", "--policy", policy, "--service", "imgcls", "--trace", "t.txt",
            "--ratio", "1", "--rate-limit", "none", "--no-oracle", "--json"]


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    text = capsys.readouterr().err
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, text
    return lines[0]


def test_a_user_class_by_reference_runs_through_sim_eval_and_reads_the_queue(folder, capsys):
    assert main(_eval("mypol:QueuePolicy")) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    import mypol

    assert row["policy"] == "mypol:QueuePolicy" and row["steps"] == 20
    assert len(mypol.SEEN) == 20 and max(q for _, q in mypol.SEEN) > 0  # saw requests waiting
    assert row["instances"] > 1  # and scaled up on them (static holds 1)


def test_a_user_class_runs_in_a_sim_engine_scenario_by_service_and_by_matrix(folder):
    (folder / "scn.yaml").write_text(
        "name: mine\nengine: sim\nduration_s: 600\n"
        "services:\n  - {name: imgcls, policy: static}\n"
        "clients:\n  - {service: imgcls, rate: 100}\n"
        "matrix:\n  policy: [static, 'mypol:QueuePolicy']\n")
    out = folder / "runs"
    assert main(["run", str(folder / "scn.yaml"), "--out", str(out)]) == 0
    import mypol

    assert len(mypol.SEEN) == 20 and all(s == "imgcls" for s, _ in mypol.SEEN)
    sims = {p.parent.parent.name: json.loads(p.read_text()) for p in out.glob("*/cells/*/rep-0/sim.json")}
    assert len(sims) == 2
    (mine,) = [v for k, v in sims.items() if "mypol" in k]
    (static,) = [v for k, v in sims.items() if "mypol" not in k]
    assert static["imgcls"]["instances"] == 1.0
    # the paper's imgcls drops what exceeds its rate limit rather than queueing it (sim eval above
    # turns the limit off): here the policy observed every window of its cell and nothing else
    assert mine["imgcls"]["policy"] == "mypol:QueuePolicy" and static["imgcls"]["policy"] == "static"


def test_register_policy_builds_with_the_keywords_the_class_takes():
    class Plain:
        def act(self, observation, action_mask):
            return 2

    class Sized:
        def __init__(self, service, total_units, extra=1):
            self.service, self.total_units = service, total_units

        def act(self, observation, action_mask):
            return 2

    register_policy("plain_test", Plain)
    register_policy("sized_test", Sized)
    try:
        plain = make_policy("plain_test", "imgcls", total_units=8)
        assert isinstance(plain, Plain) and plain.name == "plain_test"
        sized = make_policy("sized_test", "tts", total_units=12)
        assert (sized.service, sized.total_units) == ("tts", 12)
        assert {"plain_test", "sized_test"} <= set(registry.policy_names())
        with pytest.raises(ConfigError, match="already defined"):
            register_policy("rule_v2", Plain)  # a built-in name stays the built-in
        with pytest.raises(ConfigError, match="no act"):
            register_policy("nothing_test", type("Nothing", (), {}))
    finally:
        unregister_policy("plain_test")
        unregister_policy("sized_test")
    with pytest.raises(ConfigError, match="unknown policy 'plain_test'"):
        make_policy("plain_test", "imgcls", total_units=8)


def test_entry_point_loader_unit_registers_an_installed_packages_class(folder, monkeypatch):
    """The loader of the `testbed.policies` group, on a monkeypatched importlib.metadata.entry_points
    (no package is installed): the entry's class becomes a registered name."""
    import importlib.metadata

    fake = [EntryPoint(name="queue_ep", value="mypol:QueuePolicy", group=registry.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None: [e for e in fake if e.group == group])
    monkeypatch.syspath_prepend(str(folder))
    registry._installed.cache_clear()
    try:
        assert "queue_ep" in registry.policy_names()
        entry = registry.resolve("queue_ep")
        assert entry.origin == "entry point testbed.policies:queue_ep"
        pol = make_policy("queue_ep", "chatbot", total_units=8)
        assert type(pol).__name__ == "QueuePolicy" and pol.service == "chatbot"
    finally:
        registry._installed.cache_clear()  # the real group is read again next time


def test_the_rules_take_their_thresholds_from_the_profiles_in_use():
    profiles = default_profiles()
    for s in paper.SERVICES:  # the paper's services: Tables 4.9/4.10, as before
        assert RuleV1.for_service(s).__dict__ == {**paper.RULE_V1_THRESHOLDS[s], "name": "rule_v1"}
        assert RuleV2.for_service(s).__dict__ == {**paper.RULE_V2_THRESHOLDS[s], "name": "rule_v2"}
    base = profiles["imgcls"].model_dump(exclude={"rule", "name"})
    mine = {"newsvc": ServiceProfile(**base, name="newsvc"),  # outside the paper: the defaults
            "tuned": ServiceProfile(**base, name="tuned", rule=RuleThresholds(slo_high=0.5))}
    assert make_policy("rule_v1", "newsvc", total_units=8, profiles=mine).inst_util_high_2 == 0.87
    assert make_policy("rule_v2", "newsvc", total_units=8, profiles=mine).slo_high == 0.089
    assert make_policy("rule_v2", "tuned", total_units=8, profiles=mine).slo_high == 0.5


# -- bad input: one line, non-zero exit ----------------------------------------------------------

def test_a_plugin_that_fails_to_import_is_one_line(folder, capsys):
    (folder / "broken.py").write_text("raise RuntimeError('boom at import')\n")
    assert main(_eval("broken:Pol")) != 0
    line = _one_error(capsys)
    assert "--policy: policy: cannot import 'broken'" in line and "boom at import" in line
    (folder / "scn.yaml").write_text(
        "name: bad\nengine: sim\nduration_s: 60\n"
        "services:\n  - {name: imgcls, policy: 'broken:Pol'}\n"
        "clients:\n  - {service: imgcls, rate: 1}\n")
    assert main(["run", "scn.yaml", "--out", str(folder / "runs")]) != 0
    line = _one_error(capsys)
    assert re.search(r"scn\.yaml:5: services\[0\]\.policy: cannot import 'broken'", line), line
    assert not (folder / "runs").exists() or not list((folder / "runs").glob("*/cells"))


def test_a_reference_with_no_act_is_one_line(folder, capsys):
    (folder / "noact.py").write_text("class Thing:\n    def decide(self, obs):\n        return 2\n")
    assert main(_eval("noact:Thing")) != 0
    line = _one_error(capsys)
    assert "'noact:Thing' has no act(observation, action_mask) method" in line
    assert main(["sim", "compare", "--policies", "rule_v2,noact:Thing", "--traces", str(folder)]) != 0
    assert "--policies: policies: 'noact:Thing' has no act(" in _one_error(capsys)


@pytest.mark.parametrize("index", ["7", "-1", "2.0"])
def test_an_index_outside_the_mask_stops_the_run_naming_policy_index_and_mask(folder, capsys, index):
    (folder / "wild.py").write_text(f"class Wild:\n    def act(self, observation, action_mask):\n"
                                    f"        return {index}\n")
    assert main(_eval("wild:Wild")) != 0
    line = _one_error(capsys)
    assert f"policy 'wild:Wild' for imgcls: act() returned {index}, not an action index 0..4" in line
    assert "(mask (" in line


def test_a_masked_index_from_a_policy_of_ones_own_is_refused(folder, capsys):
    """-2 replicas with one replica is masked: the paper's rules may propose it (Algorithm 3
    adjusts, `adjust_masked`), a policy of one's own may not."""
    (folder / "down.py").write_text("class Down:\n    def act(self, observation, action_mask):\n"
                                    "        return 0\n")
    assert main(_eval("down:Down")) != 0
    line = _one_error(capsys)
    assert "policy 'down:Down' for imgcls: act() returned 0, an action the mask refuses (mask (0," in line
    (folder / "lenient.py").write_text("class Down:\n    adjust_masked = True\n"
                                       "    def act(self, observation, action_mask):\n        return 0\n")
    assert main(_eval("lenient:Down")) == 0


def test_a_users_policy_has_one_label_the_reference_it_was_named_by():
    """`sim eval` and a scenario call a user's policy alike: by its `module:Class`, whatever its
    own `name` says (the example's is "queue"), in results and in the decision log."""
    from pathlib import Path

    from testbed.scaler.factory import make_policy
    from testbed.scaler.policies import policy_name

    examples = Path(__file__).resolve().parents[2] / "examples"
    policy = make_policy("policies.queue_policy:QueuePolicy", "imgcls", total_units=8,
                         base_dir=examples)
    assert policy.name == "queue"
    assert policy_name(policy) == "policies.queue_policy:QueuePolicy"
