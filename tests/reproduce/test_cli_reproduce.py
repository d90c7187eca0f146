"""`testbed reproduce` with bad input: one line naming what is missing and how to get it, a
non-zero exit, and nothing written."""

from __future__ import annotations

import json

import pytest

from testbed.cli import main


def _traces(root):
    for h in (0, 8, 16):
        p = root / "test" / f"day7-shift{h}h.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("1 10\n" * 120)
    return root


def _lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def test_unknown_artefact_names_it_and_the_known_ones(tmp_path, capsys):
    out = tmp_path / "rep"
    rc = main(["reproduce", "fig9.9", "--out", str(out)])
    assert rc != 0
    (line,) = _lines(capsys.readouterr().err)
    assert "fig9.9" in line and "fig5.7" in line and "table5.4" in line
    assert list(tmp_path.iterdir()) == []


def test_missing_traces_name_the_files_and_the_option(tmp_path, capsys):
    out = tmp_path / "rep"
    rc = main(["reproduce", "table5.1", "--rule-only", "--traces", str(tmp_path / "none"),
               "--out", str(out)])
    assert rc != 0
    (line,) = _lines(capsys.readouterr().err)
    assert "traces missing" in line and "day7-shift0h.txt" in line and "--traces" in line
    assert list(tmp_path.iterdir()) == []


def test_missing_models_name_them_and_how_to_train(tmp_path, capsys):
    traces = _traces(tmp_path / "traces")
    out = tmp_path / "rep"
    rc = main(["reproduce", "table5.2", "--traces", str(traces), "--models",
               str(tmp_path / "models"), "--out", str(out)])
    assert rc != 0
    (line,) = _lines(capsys.readouterr().err)
    assert "models missing" in line and "imgcls.zip" in line
    assert "testbed train imgcls" in line and "--rule-only" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traces"]


def test_an_existing_report_folder_is_not_overwritten(tmp_path, capsys):
    traces = _traces(tmp_path / "traces")
    out = tmp_path / "rep"
    out.mkdir()
    (out / "keep").write_text("x")
    rc = main(["reproduce", "table5.1", "--rule-only", "--traces", str(traces), "--out", str(out)])
    assert rc != 0
    assert "already exists" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep"]
    assert not (tmp_path / "rep.partial").exists()


def test_a_sim_table_writes_one_report_with_paper_tolerance_and_plot(tmp_path, capsys):
    traces = _traces(tmp_path / "traces")
    out = tmp_path / "rep"
    rc = main(["reproduce", "5.1", "--rule-only", "--traces", str(traces), "--out", str(out)])
    # a flat toy trace is nothing like the paper's day: the cells fail, the report is whole
    assert rc == 1
    md = (out / "report.md").read_text()
    assert "Table 5.1" in md and "paper" in md and "oracle bound" in md and "Tolerances" in md
    # the cells beside the paper fail; the checks that hold on any trace (the oracle bound) pass
    assert "| table5.1 | **FAIL** | 3 outside tolerance." in md
    assert (out / "plots" / "table5.1.png").stat().st_size > 0
    assert (out / "report.html").read_text().startswith("<!doctype html>")
    assert not (tmp_path / "rep.partial").exists()


@pytest.mark.parametrize("name", ["fig5.7", "FIG5.8", "5.4", "table5.3"])
def test_artefact_names_and_aliases(name):
    from testbed.reproduce.artefacts import select

    (a,) = select([name])
    assert a.name.startswith(("fig", "table"))


def test_a_model_this_checkout_cannot_read_is_named(tmp_path, capsys):
    traces = _traces(tmp_path / "traces")
    models = tmp_path / "models"
    models.mkdir()
    for s in ("chatbot", "imgcls", "tts"):
        (models / f"{s}.zip").write_bytes(b"not a zip")
    rc = main(["reproduce", "table5.1", "--traces", str(traces), "--models", str(models),
               "--out", str(tmp_path / "rep")])
    assert rc != 0
    (line,) = _lines(capsys.readouterr().err)
    assert "chatbot.zip cannot be used" in line and "testbed train chatbot" in line
    assert not (tmp_path / "rep").exists() and not (tmp_path / "rep.partial").exists()


@pytest.mark.parametrize("start", ["25:00", "9", "ab:cd", "12:60"])
def test_a_bad_table54_start_is_a_usage_error(tmp_path, capsys, start):
    out = tmp_path / "rep"
    rc = main(["reproduce", "table5.4", "--rule-only", "--t54-start", start, "--out", str(out)])
    assert rc != 0
    assert "--t54-start" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("verdicts", "rc"), [
    (["PASS", "UNDECIDED"], 2),  # UNDECIDED is never a pass
    (["PASS", "FAIL"], 1),
    (["UNDECIDED", "FAIL"], 1),
    (["PASS", "NOT RUN"], 0),  # a day-long figure this size does not judge: listed apart
])
def test_the_exit_status_fails_on_fail_and_undecided(tmp_path, monkeypatch, capsys, verdicts, rc):
    from testbed.reproduce import run
    from testbed.reproduce.model import ReproResult, Verdict

    def fake_reproduce(artefacts, options):
        return ReproResult(tmp_path, [
            Verdict(a.name, a.title, v, "s",
                    decided_by="a bigger run" if v in ("UNDECIDED", "NOT RUN") else "")
            for a, v in zip(artefacts, verdicts, strict=True)], 1.0)

    monkeypatch.setattr(run, "reproduce", fake_reproduce)
    assert main(["reproduce", "fig5.8", "table5.1"]) == rc
    out = capsys.readouterr().out
    assert all(v in out for v in verdicts)
    assert ("a bigger run" in out) == ("UNDECIDED" in verdicts or "NOT RUN" in verdicts)
    if "UNDECIDED" in verdicts:
        assert "UNDECIDED: fig5.8" in out or "UNDECIDED: table5.1" in out  # beside the FAILs
    if "NOT RUN" in verdicts:
        assert "NOT RUN at this size: table5.1: a bigger run" in out


def test_allow_undecided_lets_an_undecided_reproduction_exit_0(tmp_path, monkeypatch):
    from testbed.reproduce import run
    from testbed.reproduce.model import ReproResult, Verdict

    monkeypatch.setattr(run, "reproduce", lambda artefacts, options: ReproResult(tmp_path, [
        Verdict(a.name, a.title, "UNDECIDED", "s", decided_by="x") for a in artefacts], 1.0))
    assert main(["reproduce", "fig5.8", "--allow-undecided"]) == 0


def test_an_interrupted_run_resumes_after_its_finished_artefacts(tmp_path, monkeypatch, capsys):
    """Table 5.1 finishes, Table 5.2 is interrupted: the rerun with the same --out takes 5.1 from
    what was kept and runs 5.2 only; other options are refused in one line."""
    from testbed.reproduce import run

    traces = _traces(tmp_path / "traces")
    out = tmp_path / "rep"
    argv = ["reproduce", "5.1", "5.2", "--rule-only", "--traces", str(traces), "--out", str(out)]
    real_sim, calls = run._sim, []

    def interrupted_at_52(a, options):
        calls.append(a.name)
        if a.name == "table5.2" and calls.count("table5.2") == 1:
            raise KeyboardInterrupt
        return real_sim(a, options)

    monkeypatch.setattr(run, "_sim", interrupted_at_52)
    assert main(argv) == 130
    assert "the same command with --out" in capsys.readouterr().err
    kept = tmp_path / "rep.partial" / "done" / "table5.1.json"  # plain data: loading it runs no code
    assert json.loads(kept.read_text())["artefact"] == "table5.1"
    assert main([*argv, "--quick"]) != 0  # other options: refused, nothing lost
    assert "with other options" in capsys.readouterr().err
    assert main(argv) in (0, 1)
    assert calls == ["table5.1", "table5.2", "table5.2"]  # 5.1 was not run again
    assert "table5.1: " in capsys.readouterr().out and (out / "report.md").is_file()
    assert not (tmp_path / "rep.partial").exists()
    assert not (out / "done").exists() and not (out / "options.json").exists()


def test_the_drl_columns_without_the_drl_extra_stop_before_any_work(tmp_path, monkeypatch, capsys):
    from testbed.reproduce import artefacts

    traces = _traces(tmp_path / "traces")
    monkeypatch.setattr(artefacts, "find_spec",
                        lambda name: None if name == "sb3_contrib" else object())
    rc = main(["reproduce", "table5.2", "--traces", str(traces), "--out", str(tmp_path / "rep")])
    assert rc != 0
    (line,) = _lines(capsys.readouterr().err)
    assert "drl extra (sb3_contrib not installed)" in line and "--rule-only" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traces"]


def test_a_verdict_survives_its_json_resume_state():
    from testbed.judge.outcome import Outcome
    from testbed.reproduce.model import Verdict
    from testbed.reproduce.tables import Cell, Check, TableResult

    table = TableResult("5.4", "Table 5.4", [Cell("imgcls", "ppo", {"reward": 0.5}, {"reward": 0.6},
                                                  sd={"reward": 0.01}, runs=2, passed=False, why="far")],
                        oracle={"imgcls": 0.7}, notes=["n"], checks=[Check("a >= b", True, "d")],
                        decided_by="86400 s")
    v = Verdict("table5.4", "T", "NOT RUN", "s", details=["x"], table=table, run_dir="runs/a",
                seconds=3.5, decided_by="86400 s",
                outcomes=[Outcome("a > b", "UNDECIDED", 1.0, None, "d", "1200 s", True)])
    again = Verdict.from_json(json.loads(json.dumps(v.to_json())))
    assert again == v and again.table.verdict == v.table.verdict
