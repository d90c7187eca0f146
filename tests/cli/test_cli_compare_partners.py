"""`testbed sim compare` with a joint planner asked for some of its model's services (issue 55):
inss runs the shipped model's three services, reports the one asked, says which ran beside it,
and is refused in one line where a partner cannot run."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.scaler.share import META_MEMBER
from tests.cli.fourth_service import ASR

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"


def _compare(capsys, out: Path, *extra: str, models: Path = MODELS):
    """`sim compare` at Table 5.1 for 120 steps of the shipped test day: rc, JSON rows, stderr."""
    rc = main(["sim", "compare", "--table", "5.1", "--steps", "120", "--models", str(models),
               "--out", str(out), "--json", *extra])
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")]
    assert len(rows) == len(captured.out.splitlines())  # the note is on stderr
    return rc, rows, " ".join(captured.err.split())


def test_inss_asked_for_imgcls_runs_beside_its_partners_and_reports_imgcls(tmp_path, capsys):
    pytest.importorskip("stable_baselines3", reason="inss needs the drl extra")
    rc, rows, err = _compare(capsys, tmp_path / "one", "--service", "imgcls",
                             "--policies", "inss,rule_v2")
    assert rc == 0
    assert [r["policy"] for r in rows] == ["inss", "rule_v2"]
    assert all(list(r["per_service"]) == ["imgcls"] for r in rows)
    inss, rule = rows
    assert inss["partners"] == ["chatbot", "tts"] and "partners" not in rule
    img = inss["per_service"]["imgcls"]
    assert inss["share_units"] == pytest.approx(img["share_units"])  # the row is imgcls's alone
    assert inss["reward"] == pytest.approx(img["reward"]) and inss["bound"] == img["bound"]
    note = ("inss ran chatbot (day7-shift0h.txt), tts (day7-shift16h.txt) beside imgcls on the same "
            "GPUs at the table's ratios (its model inss.zip plans chatbot, imgcls, tts together); "
            "its rows report imgcls only")
    assert f"note: {note}" in err
    assert f"Partners: {note}." in " ".join((tmp_path / "one" / "compare.md").read_text().split())

    # the partners really ran, in the model's order as in training: imgcls's figures are those of
    # a comparison of all three with the same seed, where chatbot and tts held shares beside it
    rc, (full,), _ = _compare(capsys, tmp_path / "all", "--service", "all", "--policies", "inss")
    assert rc == 0 and full["per_service"]["imgcls"] == img
    assert full["share_units"] > img["share_units"] + 1
    # imgcls placed first would have held more (so the compared services are not put first)
    rc, (first,), _ = _compare(capsys, tmp_path / "first", "--service", "imgcls,chatbot,tts",
                               "--policies", "inss")
    assert rc == 0 and first["per_service"]["imgcls"]["share_units"] > img["share_units"]
    # rule_v2 still runs imgcls alone: the same row as in a comparison without inss
    rc, (alone,), _ = _compare(capsys, tmp_path / "rule", "--service", "imgcls", "--policies", "rule_v2")
    assert rc == 0 and alone["per_service"] == rule["per_service"]


def test_the_comparison_builds_the_planner_over_its_partners_and_the_rest_over_the_asked(tmp_path):
    pytest.importorskip("stable_baselines3", reason="inss needs the drl extra")
    from testbed.traces import traces_folder
    from testbed.train.compare import LoadChoice, prepare_comparison

    c = prepare_comparison(["inss", "rule_v2", "ddpg"], LoadChoice(tables=("5.1",)), traces_folder(None),
                           models=MODELS, services=["tts"])
    assert list(c.policies["5.1", "inss"]) == list(c.policies["5.1", "ddpg"]) == ["chatbot", "imgcls", "tts"]
    assert list(c.policies["5.1", "rule_v2"]) == ["tts"]
    assert c.services == ["tts"] and c.settings.report == ("tts",)
    assert set(c.traces) == set(c.load("5.1").ratios) == {"chatbot", "imgcls", "tts"}
    assert c.load("5.1").ratios["chatbot"] == 0.15  # the table's own ratio for a partner


def _model(folder: Path, services: list[str]) -> Path:
    """A model file as far as its meta goes (a user's inss trained on other services)."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"kind": "inss", "services": services, "gpus": 2, "ratios": dict.fromkeys(services, 1.0),
            "algorithm": "TD3", "command": "testbed train --policy inss", "seed": 0, "steps": 1,
            "commit": "0" * 40, "train_traces": [], "val_traces": []}
    with zipfile.ZipFile(folder / "inss.zip", "w") as zf:
        zf.writestr(META_MEMBER, json.dumps(meta))
    return folder


def test_a_partner_without_profile_curve_or_trace_is_refused_in_one_line(tmp_path, capsys):
    """Where a partner cannot run, one line naming file and field, and nothing runs."""
    models = _model(tmp_path / "models", ["imgcls", "asr"])
    why = "inss runs asr beside imgcls: its model inss.zip plans imgcls, asr together"
    instead = "or compare imgcls with policies that need no model"
    out = tmp_path / "report"
    rc, _, err = _compare(capsys, out, "--service", "imgcls", "--policies", "inss,rule_v2",
                          models=models)
    assert rc != 0 and not out.exists()
    assert (f"{models / 'inss.zip'}: services: {why}, and asr has no profile here: give --profiles "
            f"FILE with asr's (the one it was trained with), {instead}") in err
    prof = tmp_path / "asr.yaml"
    prof.write_text(ASR)
    rc, _, err = _compare(capsys, out, "--service", "imgcls", "--policies", "inss",
                          "--profiles", str(prof), models=models)
    assert rc != 0 and not out.exists()
    assert (f"{prof}:2: services.asr.gpu: {why}, and asr's profile has no gpu curve: give asr a gpu: "
            f"block, {instead}") in err
    prof.write_text(ASR + "    gpu: default\n")
    rc, _, err = _compare(capsys, out, "--service", "imgcls", "--policies", "inss",
                          "--profiles", str(prof), models=models)
    assert rc != 0 and not out.exists()
    assert f"--trace: trace: no trace for asr ({why}): the test day has the paper's services" in err
    assert "asr from" not in err  # not named as left out: it would run
