"""`reproduce` loads only what an artefact runs (issue 45): the command and its simulator tables
never import the scenario loader (with its power planning), the runner or the report, which only
the artefacts that run a scenario need."""

from __future__ import annotations

import subprocess
import sys

SCENARIO_ONLY = ("testbed.scenario.load", "testbed.scenario.plan", "testbed.judge.power",
                 "testbed.scenario.runner", "testbed.report.build", "matplotlib")


def _loaded_after(code: str) -> list[str]:
    probe = (f"import sys\n{code}\n"
             f"print(' '.join(m for m in {SCENARIO_ONLY!r} if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300, check=True)
    return done.stdout.split()


def test_the_command_and_a_simulator_table_load_no_scenario_machinery():
    assert _loaded_after("import testbed.cli.reproduce, testbed.reproduce.run") == []
    # Table 5.1 through the simulator, as `reproduce table5.1 --rule-only` runs it (a short day)
    assert _loaded_after(
        "from testbed.reproduce.tables import sim_table\n"
        "from testbed.traces import packaged_traces\n"
        "t = sim_table('5.1', traces_dir=packaged_traces(), models_dir=None, oracle=False,"
        " max_steps=40)\n"
        "assert t.cells, t") == []


def test_a_scenario_artefact_loads_them_when_it_runs():
    found = _loaded_after("import testbed.reproduce.run as r\n"
                          "from testbed.scenario.load import load_scenario\n"
                          "load_scenario(r.SCENARIOS / 'slicing-ci.yaml')")
    assert "testbed.scenario.load" in found and "testbed.judge.power" in found
