"""The service registry: the paper's three from the packaged file, a user's services from a file,
Python or an installed package's entry point, one name one service, and plugins imported by
reference with errors that name file, line and field."""

from __future__ import annotations

import importlib.metadata

import pytest

from testbed import plugins
from testbed.errors import ConfigError
from testbed.profiles import (
    default_profiles,
    load_profiles,
    register_service,
    registry,
    services,
    unregister_service,
)
from testbed.profiles.paper import RULE_V1_THRESHOLDS, RULE_V2_THRESHOLDS, SERVICES

ASR = {"capacity": 1, "queue_limit": 11, "proc_time_ms": [150, 250], "startup_ms": 8000, "slo_ms": 800}


def test_the_papers_three_are_the_registrys_built_in_entries_with_their_tuned_rules():
    known = services()
    assert set(SERVICES) <= set(known)
    for name in SERVICES:
        assert known[name].rule.v1() == RULE_V1_THRESHOLDS[name]
        assert known[name].rule.v2() == RULE_V2_THRESHOLDS[name]
        assert known[name].client and known[name].handler  # their real APIs, named in services.yaml


def test_a_file_adds_a_service_with_documented_defaults(tmp_path):
    f = tmp_path / "asr.yaml"
    f.write_text("services:\n  asr:\n" + "".join(f"    {k}: {v}\n" for k, v in ASR.items()))
    asr = load_profiles(f)["asr"]
    assert asr.rule.v2() == {"slo_high": 0.089, "slo_low": 0.0008, "inst_util_high": 0.90,
                             "inst_util_low": 0.31}
    assert asr.request_spec.upload_bytes == 1024 and asr.client is None and asr.deploy is None
    assert asr.instance_rps == pytest.approx(5.0)
    assert "asr" not in default_profiles()  # a file adds to one load, not to the registry


def test_a_partial_rule_of_a_known_service_changes_only_its_fields(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("services:\n  imgcls:\n    rule: {slo_high: 0.5}\n")
    rule = load_profiles(f)["imgcls"].rule
    assert rule.slo_high == 0.5
    assert rule.inst_util_high == RULE_V2_THRESHOLDS["imgcls"]["inst_util_high"]


def test_register_service_and_one_name_is_one_service():
    try:
        assert register_service({"asr": ASR}) == ["asr"]
        assert services()["asr"].slo_ms == 800
        with pytest.raises(ConfigError, match="already defined"):
            register_service({"asr": ASR})
        with pytest.raises(ConfigError, match="already defined"):
            register_service({"chatbot": ASR})
        register_service({"asr": {**ASR, "slo_ms": 900}}, replace=True)
        assert services()["asr"].slo_ms == 900
    finally:
        unregister_service("asr")
    assert "asr" not in services()


def test_a_profile_with_a_field_missing_names_it():
    with pytest.raises(ConfigError, match=r"asr\.slo_ms"):
        register_service({"asr": {k: v for k, v in ASR.items() if k != "slo_ms"}})


def test_a_plugin_that_fails_to_import_is_one_line_with_file_line_and_field(tmp_path):
    (tmp_path / "broken_api.py").write_text("raise RuntimeError('boom')\n")
    f = tmp_path / "asr.yaml"
    f.write_text("services:\n  asr:\n" + "".join(f"    {k}: {v}\n" for k, v in ASR.items())
                 + "    handler: broken_api:Handler\n")
    with pytest.raises(ConfigError) as exc:
        load_profiles(f)
    assert str(exc.value) == (f"{f}:8: services.asr.handler: cannot import 'broken_api' for "
                              "'broken_api:Handler' (RuntimeError: boom)")


def test_a_missing_attribute_and_a_malformed_reference():
    with pytest.raises(ConfigError, match="has no attribute 'Nope'"):
        plugins.load_ref("json:Nope", source="x.yaml", line=3, field="client")
    with pytest.raises(ConfigError, match=r"asr\.handler: String should match pattern"):
        register_service({"asr": {**ASR, "handler": "not a reference"}})
    assert plugins.is_ref("a.b:C") and not plugins.is_ref("rule_v2")


def test_entry_point_loader_with_a_stand_in_metadata(monkeypatch, tmp_path):
    """A unit test of the loader: importlib.metadata's entry points replaced by one of ours."""
    f = tmp_path / "ocr.yaml"
    f.write_text("services:\n  ocr:\n" + "".join(f"    {k}: {v}\n" for k, v in ASR.items()))
    (tmp_path / "ocr_plugin.py").write_text(f"PROFILES = {str(f)!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = importlib.metadata.EntryPoint("ocr", "ocr_plugin:PROFILES", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None: [ep] if group == registry.ENTRY_POINT_GROUP else [])
    registry._installed_profiles.cache_clear()
    try:
        assert services()["ocr"].slo_ms == 800
        twice = importlib.metadata.EntryPoint("tts", "ocr_plugin:PROFILES", registry.ENTRY_POINT_GROUP)
        monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [ep, twice])
        registry._installed_profiles.cache_clear()
        with pytest.raises(ConfigError, match=r"already defined by entry point testbed\.services:ocr"):
            services()
    finally:
        registry._installed_profiles.cache_clear()
