"""`gpu: NAME` in a user's profile file refers to a built-in GPU curve instead of copying it
(issue 43): `default` is the packaged services' curve; a packaged gpu-NAME.yaml adds NAME (a curve)
or NAME:SERVICE (a profile file's per-service curves); an unknown name is one located error."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.errors import ConfigError
from testbed.profiles import default_profiles, load_profiles
from testbed.profiles.service import gpu_curves_in

OWN = """\
services:
  vidan:
    capacity: 1
    queue_limit: 11
    proc_time_ms: [90, 140]
    startup_ms: 8000
    slo_ms: 800
    gpu: {curve}
"""


def test_gpu_default_is_the_packaged_services_curve(tmp_path: Path):
    (tmp_path / "own.yaml").write_text(OWN.format(curve="default"))
    own = load_profiles(tmp_path / "own.yaml")["vidan"]
    assert own.gpu == default_profiles()["imgcls"].gpu
    assert own.time_ms(batch=4, share_pct=50) == pytest.approx(
        own.mean_proc_time_ms * own.gpu.batch_factor(4) * own.gpu.share_factor(50))


def test_an_unknown_curve_is_one_line_naming_file_line_and_field(tmp_path: Path):
    (tmp_path / "own.yaml").write_text(OWN.format(curve="nosuch"))
    with pytest.raises(ConfigError) as exc:
        load_profiles(tmp_path / "own.yaml")
    text = str(exc.value)
    assert text.startswith(f"{tmp_path / 'own.yaml'}:8: services.vidan.gpu: unknown GPU curve "
                           "'nosuch'") and "default" in text and "\n" not in text


def test_curve_files_beside_the_packaged_profiles_are_named_by_their_file(tmp_path: Path):
    packaged = Path(__file__).resolve().parents[2] / "testbed" / "profiles" / "services.yaml"
    (tmp_path / "services.yaml").write_text(packaged.read_text())
    (tmp_path / "gpu-flat.yaml").write_text(
        "gpu_curve: {ref_share_pct: 25, batch_curve: [0, 0, 1], share_exponent: 0,\n"
        "            share_knee_pct: 50, interference: [0, 0], cache_util: 0, dram_util: 0}\n")
    (tmp_path / "gpu-measured.yaml").write_text(
        "services:\n  imgcls:\n    gpu: {ref_share_pct: 25, batch_curve: [0, 0.4, 0.6],\n"
        "      share_exponent: 0.67, share_knee_pct: 100, interference: [0.37, 0.3],\n"
        "      cache_util: 0.6, dram_util: 0.5}\n")
    curves = gpu_curves_in(tmp_path)
    assert set(curves) == {"default", "assumed", "flat", "measured:imgcls"}
    assert curves["measured:imgcls"]["batch_curve"] == [0, 0.4, 0.6]
    assert curves["flat"]["share_exponent"] == 0
