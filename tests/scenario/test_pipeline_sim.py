"""A scenario's `pipelines:` on the simulator engine: the chain is routed and reported; a later
stage with its own client, or a stage that is no listed service, is one error with file, line and
field, and nothing runs."""

from __future__ import annotations

import json

from testbed.cli import main

SCN = """\
name: pipe
engine: sim
duration_s: 1800
services:
  - {name: imgcls, policy: rule_v2}
  - {name: tts, policy: rule_v2}
clients:
  - {service: imgcls, rate: 8}
pipelines:
  - {services: [imgcls, tts], sla_ms: 3000}
expect:
  - chain_violation_rate <= 1
  - mean_e2e_ms > mean_latency_ms[service=imgcls]
"""


def _run(tmp_path, text):
    path = tmp_path / "pipe.yaml"
    path.write_text(text)
    out = tmp_path / "runs"
    return main(["run", str(path), "--out", str(out)]), out


def test_a_routed_pipeline_is_reported_per_cell(tmp_path):
    rc, out = _run(tmp_path, SCN)
    assert rc == 0
    (chains,) = list(out.glob("*/cells/*/rep-0/chains.json"))
    (c,) = json.loads(chains.read_text())
    assert c["pipeline"] == "imgcls>tts" and c["requests"] > 10_000
    sim = json.loads((chains.parent / "sim.json").read_text())
    assert set(sim) == {"imgcls", "tts"}  # tts served the routed requests
    assert c["mean_e2e_ms"] > 1000.0 * sim["imgcls"]["proc_time"]
    (report,) = list(out.glob("*/report.md"))
    assert "Routed pipelines (simulator)" in report.read_text()


def test_a_later_stage_with_its_own_client_is_one_error(tmp_path, capsys):
    rc, out = _run(tmp_path, SCN.replace("  - {service: imgcls, rate: 8}\n",
                                         "  - {service: imgcls, rate: 8}\n  - {service: tts, rate: 2}\n"))
    assert rc != 0
    err = capsys.readouterr().err.replace("\n", " ")
    assert "pipe.yaml:9: clients[1].service: tts is a later stage of pipelines[0]" in " ".join(err.split())
    assert not out.exists() or not list(out.glob("*/cells"))


def test_a_pipeline_naming_an_unlisted_service_is_one_error(tmp_path, capsys):
    rc, _ = _run(tmp_path, SCN.replace("[imgcls, tts]", "[imgcls, chatbot]"))
    assert rc != 0
    err = " ".join(capsys.readouterr().err.split())
    assert "pipe.yaml:10: pipelines[0].services[1]: no service 'chatbot' in `services:`" in err
