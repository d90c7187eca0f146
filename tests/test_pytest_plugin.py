"""Which files the pytest plugin collects as scenarios: one named on the command line wherever it
is, the files its globs match (command line, ini file, or the default folder named `scenarios`),
and never a YAML file that is not a scenario. Each case runs pytest in a folder of its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.pytest_plugin import TIMED_NICE, WORKER_NICE, glob_regex, looks_like_scenario, matches_glob
from testbed.traces import packaged_traces

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
TRACES = packaged_traces()


@pytest.fixture(autouse=True)
def _lean_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sessions these tests start load what the suite's own does (pyproject's addopts): not
    hypothesis's plugin, a second of import in each process, or pytest-benchmark's."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest -p no:benchmark")

# a simulator scenario of one cell over one minute of the test day: seconds to run
SCENARIO = f"""\
name: tiny-sim
engine: sim
traces_dir: {TRACES}
duration_s: 60
scaler_period_s: 30
services:
  - {{name: imgcls, policy: rule_v2}}
clients:
  - {{service: imgcls, trace: test/day7-shift8h.txt, ratio: 0.4}}
expect:
  - slo_violation_rate[service=imgcls] <= 1
"""
# YAML files that are not scenarios, of the kinds a repository holds beside them
PROFILE = "sources: {startup_ms: faster}\nservices:\n  imgcls: {startup_ms: 1000}\n"
CI_CONFIG = "on: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n    steps: [{run: pytest}]\n"
PLAYBOOK = "- hosts: all\n  tasks: [{ansible.builtin.ping: {}}]\n"


@pytest.fixture(autouse=True)
def _scenario_layer_loaded():
    """pytester's in-process runs forget the modules a run imported, and numpy cannot be imported
    twice in one process: the layer that collection loads is loaded here, once, first."""
    import testbed.scenario.load
    import testbed.scenario.matrix  # noqa: F401


def write(pytester: pytest.Pytester, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def collected(pytester: pytest.Pytester, *args: str) -> list[str]:
    """The node ids a collect-only run lists."""
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", *args)
    return [line for line in result.outlines if "::" in line]


def test_a_scenario_named_on_the_command_line_runs_wherever_it_is(pytester: pytest.Pytester):
    write(pytester, {"exp/my.yaml": SCENARIO})
    # a run of its own: the simulator and the report load what an in-process run would forget
    result = pytester.runpytest_subprocess("exp/my.yaml", "-p", "no:cacheprovider",
                                           "--scenario-out", str(pytester.path / "runs"))
    result.assert_outcomes(passed=2)  # the cell and the expect block
    assert [p.name[-9:] for p in (pytester.path / "runs").iterdir()] == ["-tiny-sim"]


def test_a_named_file_is_collected_from_any_folder(pytester: pytest.Pytester, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere" / "my-scenario.yml"
    elsewhere.parent.mkdir()
    elsewhere.write_text(SCENARIO)
    write(pytester, {"exp/deeper/my.yaml": SCENARIO})
    assert collected(pytester, "exp/deeper/my.yaml") == ["exp/deeper/my.yaml::base",
                                                         "exp/deeper/my.yaml::expect"]
    assert len(collected(pytester, str(elsewhere))) == 2
    # the folder alone: the default globs do not match exp/
    assert collected(pytester, "exp") == []


def test_globs_from_the_command_line_or_the_ini_file_say_which_files_are_scenarios(
        pytester: pytest.Pytester):
    write(pytester, {"my-exps/a.yaml": SCENARIO, "my-exps/b/c.yaml": SCENARIO,
                     "my-exps/b/notes.yml": SCENARIO})
    everything = ["my-exps/a.yaml::base", "my-exps/a.yaml::expect",
                  "my-exps/b/c.yaml::base", "my-exps/b/c.yaml::expect"]
    assert collected(pytester, "my-exps", "--scenario-glob", "my-exps/**/*.yaml") == everything
    assert collected(pytester, "my-exps", "--scenario-glob", "my-exps/*.yaml") == everything[:2]
    pytester.makeini("[pytest]\ntestbed_scenarios = elsewhere/*.yaml my-exps/**/*.yaml\n")
    assert collected(pytester, "my-exps") == everything
    # the command line replaces the ini file's globs
    assert collected(pytester, "my-exps", "--scenario-glob", "my-exps/b/*.yml") == [
        "my-exps/b/notes.yml::base", "my-exps/b/notes.yml::expect"]


def test_pyproject_takes_the_globs_as_a_list(pytester: pytest.Pytester):
    write(pytester, {"my-exps/b/c.yaml": SCENARIO})
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\ntestbed_scenarios = ["my-exps/**/*.yaml"]\n')
    assert collected(pytester, "my-exps") == ["my-exps/b/c.yaml::base", "my-exps/b/c.yaml::expect"]


def test_by_default_the_files_of_a_folder_named_scenarios_as_before(pytester: pytest.Pytester):
    write(pytester, {"scenarios/a.yaml": SCENARIO, "scenarios/profiles/fast.yaml": PROFILE,
                     "scenarios/profiles/odd.yaml": SCENARIO, "lab/scenarios/b.yml": SCENARIO})
    assert collected(pytester) == ["lab/scenarios/b.yml::base", "lab/scenarios/b.yml::expect",
                                   "scenarios/a.yaml::base", "scenarios/a.yaml::expect"]


def test_yaml_that_is_not_a_scenario_is_never_collected(pytester: pytest.Pytester):
    others = {"scenarios/profiles/fast.yaml": PROFILE, "scenarios/ci.yaml": CI_CONFIG,
              "exp/site.yml": PLAYBOOK, "exp/empty.yaml": "", "exp/testbed.yaml":
              "name: tb\nprofile: local\nlink: {capacity_mbit: 100}\n"}
    write(pytester, {**others, "exp/real.yaml": SCENARIO})
    assert collected(pytester, ".", "--scenario-glob", "**/*.yaml", "--scenario-glob",
                     "**/*.yml") == ["exp/real.yaml::base", "exp/real.yaml::expect"]
    # named on the command line: pytest finds nothing to collect in any of them, and says so
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", *others)
    assert result.ret != 0 and not [line for line in result.outlines if "::" in line]
    for name in others:
        result.stderr.fnmatch_lines([f"ERROR: not found: */{name}"])


def test_a_scenario_with_a_yaml_error_is_reported_not_left_out(pytester: pytest.Pytester):
    write(pytester, {"exp/broken.yaml": SCENARIO.replace("services:", "services: [")})
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", "exp/broken.yaml")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*exp/broken.yaml: invalid YAML*"])


def test_glob_rules():
    def match(glob: str, path: str, root: str = "/repo") -> bool:
        return matches_glob(Path(path), [glob_regex(glob)], Path(root))

    assert match("**/scenarios/*.yaml", "/repo/scenarios/a.yaml")
    assert match("**/scenarios/*.yaml", "/repo/x/scenarios/a.yaml")
    assert match("**/scenarios/*.yaml", "/elsewhere/scenarios/a.yaml")  # outside the rootdir
    assert not match("**/scenarios/*.yaml", "/repo/scenarios/profiles/a.yaml")
    assert match("my-exps/**/*.yaml", "/repo/my-exps/a.yaml")
    assert match("my-exps/**/*.yaml", "/repo/my-exps/b/c/d.yaml")
    assert not match("my-exps/*.yaml", "/repo/my-exps/b/d.yaml")
    assert not match("my-exps/*.yaml", "/elsewhere/my-exps/a.yaml")  # relative: from the rootdir
    assert match("/elsewhere/*/a.yaml", "/elsewhere/x/a.yaml")
    assert match("exp/run-?.yaml", "/repo/exp/run-1.yaml")
    assert match("exp/run-[12].yaml", "/repo/exp/run-2.yaml")
    assert not match("exp/run-[!12].yaml", "/repo/exp/run-2.yaml")
    assert not match("exp/*.yaml", "/repo/exp.yaml")


def test_a_scenario_by_its_content(tmp_path: Path):
    def looks(text: str) -> bool:
        path = tmp_path / "x.yaml"
        path.write_text(text)
        return looks_like_scenario(path)

    assert looks(SCENARIO)
    assert looks("name: x\nduration_s: 10\n")  # a scenario missing services: its error is shown
    assert not looks(PROFILE) and not looks(CI_CONFIG) and not looks(PLAYBOOK) and not looks("")
    assert looks("duration_s: 10\nservices: [\n")  # broken, but a scenario
    assert not looks("a: [\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority needs root")
def test_under_xdist_a_timed_test_runs_ahead_and_the_others_as_they_were(pytester: pytest.Pytester):
    """Under -n a worker's untimed tests run at WORKER_NICE and a `timed` one (with the processes
    it starts) at TIMED_NICE; a serial run leaves both at the shell's."""
    pytester.makepyfile(test_probe=f"""
        import os, subprocess, sys
        import pytest
        from testbed.pytest_plugin import timed_priority

        CHILD = [sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"]
        WORKER = "PYTEST_XDIST_WORKER" in os.environ

        @pytest.mark.timed
        def test_timed():
            with timed_priority():
                assert os.getpriority(os.PRIO_PROCESS, 0) == {TIMED_NICE}
                assert int(subprocess.run(CHILD, capture_output=True, text=True).stdout) == {TIMED_NICE}
            assert os.getpriority(os.PRIO_PROCESS, 0) == ({WORKER_NICE} if WORKER else 0)

        def test_plain():
            assert os.getpriority(os.PRIO_PROCESS, 0) == ({WORKER_NICE} if WORKER else 0)
        """)
    pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider").assert_outcomes(passed=2)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


BEHIND_TESTS = """
    import time

    import pytest
    from testbed.pytest_plugin import MachineBehind

    tries = {"twice": 0, "once": 0, "real": 0}
    PAUSE_S = 0.5

    @pytest.mark.timed
    def test_behind_twice():
        tries["twice"] += 1
        raise MachineBehind(f"clients p99 late imgcls {120 + tries['twice']} ms", {"imgcls": 121.0})

    @pytest.mark.timed
    def test_behind_once_then_on_time():
        tries["once"] += 1
        if tries["once"] == 1:
            tries["first"] = time.monotonic()
            raise MachineBehind("clients p99 late chatbot 300 ms", {"chatbot": 300.0})
        assert time.monotonic() - tries["first"] >= PAUSE_S  # the re-run came after the pause

    @pytest.mark.timed
    def test_real_regression():
        tries["real"] += 1
        assert tries["real"] == 0, "the replicas answered 40 ms late"
"""


def test_a_test_the_machine_fell_behind_in_is_rerun_once_then_reported_apart(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """Issue 41: MachineBehind re-runs a test once, after --machine-behind-pause; behind again, it
    is MACHINE BEHIND with both tries' lateness, never a pass, and fails the session only with
    --machine-behind fail (CI). A real failure is neither re-run nor excused."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # this checkout's plugin, in the subprocesses
    pytester.makepyfile(test_behind=BEHIND_TESTS)
    for args in ((), ("-n", "2")):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA",
                                               "--machine-behind-pause", "0.5", *args)
        out = result.stdout.str()
        assert result.ret == 1  # the real regression
        assert "= 1 failed, 1 passed, 1 machine behind in" in out, out
        assert "MACHINE BEHIND test_behind.py::test_behind_twice: the machine fell behind: clients " \
               "p99 late imgcls 122 ms (first try: clients p99 late imgcls 121 ms)" in out
        assert "the replicas answered 40 ms late" in out
    pytester.makepyfile(test_behind=BEHIND_TESTS.replace("test_real_regression", "_not_collected"))
    pause = ("--machine-behind-pause", "0.5")
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider", *pause).ret == 0
    strict = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--machine-behind", "fail", *pause)
    assert strict.ret == 1 and "= 1 passed, 1 machine behind in" in strict.stdout.str()
