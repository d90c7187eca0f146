"""Profile YAML: Table 4.4 defaults, round trip, errors with file/line/field."""

import pytest

from testbed.cluster.profile import default_profiles, dump_profiles, load_profiles, write_profiles
from testbed.errors import ConfigError


def test_defaults_are_table_4_4():
    p = default_profiles()
    assert {k: (v.capacity, v.proc_time_ms, v.startup_ms, v.slo_ms) for k, v in p.items()} == {
        "chatbot": (1, (140, 420), 13000, 2500),
        "imgcls": (1, (60, 80), 11000, 500),
        "tts": (1, (130, 390), 21000, 2500),
    }
    assert all(v.units == 1 for v in p.values())


def test_round_trip_and_partial_override(tmp_path):
    profiles = default_profiles()
    profiles["imgcls"] = profiles["imgcls"].model_copy(update={"capacity": 3, "proc_time_ms": (10.0, 20.0)})
    f = tmp_path / "p.yaml"
    write_profiles(f, {"imgcls": profiles["imgcls"]})
    loaded = load_profiles(f)
    assert loaded == profiles
    assert "proc_time_ms:" in dump_profiles(profiles)


def test_bad_profile_names_file_line_and_field(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("services:\n  tts:\n    capacity: 0\n    queue_limit: 5\n    proc_time_ms: [300, 100]\n"
                 "    startup_ms: 1\n    slo_ms: 2\n    colour: red\n")
    with pytest.raises(ConfigError) as exc:
        load_profiles(f)
    msg = str(exc.value)
    assert f"{f}:3: services.tts.capacity" in msg
    assert f"{f}:8: services.tts.colour: unknown key" in msg
