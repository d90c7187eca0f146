"""`testbed sim compare` as a user runs it: the rows and the report, and bad input that stops
everything before anything runs (file, line and field in the message)."""

from __future__ import annotations

import json

import pytest

from testbed.cli import main
from tests.cli.fourth_service import ASR


@pytest.fixture
def traces(tmp_path):
    d = tmp_path / "traces" / "test"
    d.mkdir(parents=True)
    for shift in (0, 8, 16):
        (d / f"day7-shift{shift}h.txt").write_text("1 40\n" * 300 + "1 90\n" * 300)
    return tmp_path / "traces"


def _compare(tmp_path, traces, *extra):
    out = tmp_path / "report"
    rc = main(["sim", "compare", "--traces", str(traces), "--load", "5.1", "--out", str(out),
               "--models", str(tmp_path / "no-models"), *extra])
    return rc, out


def test_compare_reports_every_asked_policy_below_the_bound_and_writes_the_plots(tmp_path, traces, capsys):
    rc, out = _compare(tmp_path, traces, "--policies", "fa2,rule_v2,gslice", "--json")
    assert rc == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["policy"] for r in rows] == ["fa2", "rule_v2", "gslice"]
    for r in rows:
        assert r["steps"] == 20
        assert r["reward"] <= r["bound"]
        for key in ("slo_violation_rate", "share_units", "throughput", "decide_ms"):
            assert key in r
    for name in ("compare.json", "compare.md", "share-Table-5-1.png", "pareto-Table-5-1.png"):
        assert (out / name).exists(), name


def test_an_unknown_policy_is_one_error_and_nothing_runs(tmp_path, traces, capsys):
    rc, out = _compare(tmp_path, traces, "--policies", "fa2,fa3")
    assert rc != 0
    assert "--policies: policies: unknown policy 'fa3'" in capsys.readouterr().err.replace("\n", "")
    assert not out.exists()


def test_a_missing_model_names_the_file(tmp_path, traces, capsys):
    rc, out = _compare(tmp_path, traces, "--policies", "ddpg")
    assert rc != 0
    assert "ddpg.zip" in capsys.readouterr().err.replace("\n", "") and not out.exists()


ONE = "gpus: 2\nservices:\n  imgcls:\n    replicas: 1\n    share_pct: "


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (f"{ONE}120\n", ":5: services.imgcls.share_pct"),
        (f"{ONE}0\n", ":5: services.imgcls.share_pct"),
        (f"{ONE}25\n    batch: 0\n", ":6: services.imgcls.batch"),
        (
            "gpus: 1\nservices:\n  tts:\n    replicas: 2\n    share_pct: 40\n    gpus: [0, 0]\n"
            "  imgcls:\n    replicas: 1\n    share_pct: 30\n    gpus: [0]\n",
            ":9: services.imgcls.share_pct: shares on GPU 0 sum to 110 %",
        ),
        (
            "gpus: 1\nservices:\n  tts:\n    replicas: 3\n    share_pct: 40\n",
            ":5: services.tts.share_pct: 3 replicas of 40 % do not fit",
        ),
    ],
)
def test_a_bad_layout_names_file_line_and_field(tmp_path, traces, capsys, body, where):
    layout = tmp_path / "layout.yaml"
    layout.write_text(body)
    rc, out = _compare(tmp_path, traces, "--policies", "static", "--layout", str(layout))
    assert rc != 0
    assert f"{layout}{where}" in capsys.readouterr().err.replace("\n", "")
    assert not out.exists()


def test_a_profile_without_the_curve_a_policy_needs(tmp_path, traces, capsys):
    prof = tmp_path / "p.yaml"
    prof.write_text("services:\n  chatbot:\n    gpu: null\n")
    rc, out = _compare(tmp_path, traces, "--policies", "rule_v2,fa2", "--profiles", str(prof))
    assert rc != 0
    assert f"{prof}:3: services.chatbot.gpu: fa2 need the profile's gpu curve" in \
        capsys.readouterr().err.replace("\n", "")
    assert not out.exists()
    rc, out = _compare(tmp_path, traces, "--policies", "rule_v2", "--profiles", str(prof), "--steps", "3")
    assert rc == 0  # DRAFAS's policies need no curve


def test_a_pipeline_is_routed_and_measured_end_to_end_for_every_policy(tmp_path, traces, capsys):
    rc, out = _compare(tmp_path, traces, "--policies", "fa2,rule_v2", "--pipeline", "imgcls,tts:3000",
                       "--json")
    assert rc == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    for r in rows:
        (c,) = r["chains"]
        assert c["pipeline"] == "imgcls>tts" and c["sla_ms"] == 3000
        assert c["requests"] == c["completed"] + c["dropped"] > 0
        assert 0 <= c["violation_rate"] <= 1 and c["on_time"] <= c["completed"]
    assert "Routed chains" in (out / "compare.md").read_text()


def test_a_pipeline_naming_an_unknown_service_is_one_error(tmp_path, traces, capsys):
    rc, out = _compare(tmp_path, traces, "--policies", "fa2", "--pipeline", "imgcls,ocr:3000")
    assert rc != 0
    err = " ".join(capsys.readouterr().err.split())
    assert "--pipeline: pipeline: unknown service 'ocr'" in err and not out.exists()




def _asr(tmp_path):
    prof = tmp_path / "asr.yaml"
    prof.write_text(ASR)
    trace = tmp_path / "asr-day.txt"
    trace.write_text("".join(f"1 {2 + (i // 60) % 3}\n" for i in range(600)))
    return str(prof), str(trace)


def test_compare_runs_a_service_of_ones_own_on_its_trace_and_names_the_trace(tmp_path, traces, capsys):
    prof, trace = _asr(tmp_path)
    rc, out = _compare(tmp_path, traces, "--service", "asr", "--trace", f"asr={trace}",
                       "--profiles", prof, "--policies", "rule_v2,static", "--json")
    assert rc == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["policy"] for r in rows] == ["rule_v2", "static"]
    for r in rows:
        assert list(r["per_service"]) == ["asr"] and r["steps"] == 20
        assert r["load"] == "asr-day.txt at Table 5.1's load"
    assert "asr-day.txt" in (out / "compare.md").read_text()


def test_compare_refuses_a_share_policy_for_a_service_without_a_gpu_curve(tmp_path, traces, capsys):
    prof, trace = _asr(tmp_path)
    rc, out = _compare(tmp_path, traces, "--service", "asr", "--trace", f"asr={trace}",
                       "--profiles", prof, "--policies", "rule_v2,fa2")
    assert rc != 0
    err = " ".join(capsys.readouterr().err.split())
    assert "services.asr.gpu: fa2 need the profile's gpu curve" in err
    assert "give asr a gpu: block, or compare it with policies that set no shares" in err
    assert not out.exists()


def test_compare_with_a_fourth_service_in_the_profile_file(tmp_path, traces, capsys):
    prof, trace = _asr(tmp_path)
    rc, _ = _compare(tmp_path, traces, "--profiles", prof, "--policies", "rule_v2", "--json")
    assert rc == 0  # the paper's three, and a line naming the one left out
    captured = capsys.readouterr()
    (row,) = [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")]
    assert list(row["per_service"]) == ["chatbot", "imgcls", "tts"] and row["load"] == "Table 5.1"
    assert "asr from" in captured.err
    rc, _ = _compare(tmp_path, traces, "--profiles", prof, "--policies", "rule_v2", "--json",
                     "--service", "all,asr", "--trace", f"asr={trace}")
    assert rc == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert list(row["per_service"]) == ["chatbot", "imgcls", "tts", "asr"]
