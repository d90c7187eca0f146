"""The one service-profile model: Table 4.4 defaults with their sources, partial overrides, round
trip, errors with file/line/field."""

from pathlib import Path

import pytest

from testbed.errors import ConfigError
from testbed.profiles import (
    PACKAGED_PROFILES,
    ServiceProfile,
    default_profiles,
    dump_profiles,
    load_profiles,
    write_profiles,
)


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
    profiles["imgcls"] = profiles["imgcls"].replace(capacity=3, proc_time_ms=(10.0, 20.0))
    f = tmp_path / "p.yaml"
    write_profiles(f, {"imgcls": profiles["imgcls"]})
    loaded = load_profiles(f)
    assert {k: v.model_dump(exclude={"sources"}) for k, v in loaded.items()} == \
        {k: v.model_dump(exclude={"sources"}) for k, v in profiles.items()}
    assert loaded["imgcls"].sources["capacity"] == f"given in {f}"  # a number without a source
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


def test_every_packaged_number_names_its_source():
    for name, p in default_profiles().items():
        numbers = set(ServiceProfile.model_fields) - {"name", "sources"}
        missing = sorted(numbers - set(p.sources))
        assert not missing, f"{name}: no source for {missing}"
        assert all(len(text) > 10 for text in p.sources.values())


def test_a_file_may_override_some_fields_of_a_service(tmp_path):
    f = tmp_path / "fast.yaml"
    f.write_text("services:\n  imgcls: {startup_ms: 1000}\n")
    loaded = load_profiles(f)
    base = default_profiles()
    assert loaded["imgcls"].startup_ms == 1000
    assert loaded["imgcls"].replace(startup_ms=base["imgcls"].startup_ms).model_dump(exclude={"sources"}) == \
        base["imgcls"].model_dump(exclude={"sources"})
    assert loaded["imgcls"].sources["startup_ms"] == f"given in {f}"
    assert loaded["imgcls"].sources["slo_ms"] == base["imgcls"].sources["slo_ms"]
    assert loaded["tts"] == base["tts"]


def test_replace_validates_and_drops_the_changed_numbers_source():
    p = default_profiles()["chatbot"]
    q = p.replace(queue_limit=3)
    assert q.queue_limit == 3 and "queue_limit" not in q.sources and "slo_ms" in q.sources
    with pytest.raises(ValueError, match="proc_time_ms"):
        p.replace(proc_time_ms=(5, 1))


def test_the_slicing_scenarios_profile_changes_only_startup():
    from pathlib import Path

    fast = load_profiles(Path(__file__).resolve().parents[2] / "scenarios" / "profiles" / "fast-startup.yaml")
    for name, p in default_profiles().items():
        assert fast[name].startup_ms == 1000
        assert fast[name].replace(startup_ms=p.startup_ms).model_dump(exclude={"sources"}) == \
            p.model_dump(exclude={"sources"})


def test_every_number_of_the_gpu_curve_names_its_source():
    from testbed.profiles import GpuCurve

    for name, p in default_profiles().items():
        assert p.gpu is not None, name
        missing = sorted(set(GpuCurve.model_fields) - {"sources"} - set(p.gpu.sources))
        assert not missing, f"{name}: gpu curve has no source for {missing}"


def test_the_gpu_curve_is_one_at_the_profiled_point_and_reproduces_inss_fig2():
    g = default_profiles()["imgcls"].gpu
    assert g.batch_factor(1) == pytest.approx(1.0)
    assert g.share_factor(g.ref_share_pct) == pytest.approx(1.0)
    assert g.share_factor(50) < 1.0 < g.share_factor(10)
    assert g.share_factor(100) == pytest.approx(g.share_factor(g.share_knee_pct))
    assert g.stretch([g.pressure(30), g.pressure(60)]) == pytest.approx(1.225)  # Fig. 2: +22.7 %
    assert g.stretch([]) == 1.0


def test_a_bad_gpu_curve_names_file_line_and_field(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(
        "services:\n  imgcls:\n    gpu:\n      ref_share_pct: 120\n      batch_curve: [0, 1, 0]\n"
        "      share_exponent: 1\n      share_knee_pct: 50\n      interference: [0.1, 0.1]\n"
        "      cache_util: 0.5\n      dram_util: 0.5\n"
    )
    with pytest.raises(ConfigError) as err:
        load_profiles(f)
    assert f"{f}:4: services.imgcls.gpu.ref_share_pct" in str(err.value)


def test_gpu_stretches_is_the_simulators_interference_for_the_same_placement():
    """The local cluster's stretches (gpu_stretches) and the simulator's (GpuSimCluster.stretches)
    agree instance for instance; a service without a gpu curve neither feels nor exerts any."""
    from testbed.cluster.base import ServiceTarget
    from testbed.load.trace import Trace
    from testbed.profiles import default_profiles, gpu_stretches
    from testbed.sim.gpu import GpuSimCluster

    profiles = default_profiles()
    placement = {"chatbot": ServiceTarget(2, 30.0, 1, (0, 1)), "imgcls": ServiceTarget(1, 60.0, 4, (0,)),
                 "tts": ServiceTarget(1, 25.0, 1, (1,))}
    c = GpuSimCluster(profiles, {s: Trace.constant(1, 120) for s in profiles}, dict.fromkeys(profiles, 1.0),
                      gpus=2, initial=placement)
    sim = c.stretches(c.now)
    placed = [(id(i), i.gpu, i.share, profiles[s].gpu) for s, b in c.sims.items() for i in b.instances]
    ours = gpu_stretches(placed)
    assert ours == pytest.approx(sim) and len(ours) == 4
    assert max(ours.values()) == pytest.approx(1 + 0.25 * 0.6 * 0.6 + 0.20 * 0.5 * 0.6)  # beside 60 %
    no_curve = gpu_stretches([("a", 0, 50.0, None), ("b", 0, 50.0, profiles["imgcls"].gpu)])
    assert no_curve == {"a": 1.0, "b": 1.0}


def test_the_packaged_profiles_path_names_the_file_they_are_read_from():
    # errors of the scalers and the profile parser name this path: it must be the real file
    path = Path(__file__).parents[2] / PACKAGED_PROFILES
    assert load_profiles(path) == default_profiles()
