"""docs/profiles.md lists every field of a service's profile and of its blocks, so that a user
never reads services.yaml to find them."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.profiles.parts import DeploySpec, RequestSpec, RuleThresholds
from testbed.profiles.service import GpuCurve, ServiceProfile

PAGE = (Path(__file__).parents[2] / "docs" / "profiles.md").read_text()


@pytest.mark.parametrize("model, prefix", [(ServiceProfile, ""), (RuleThresholds, "rule."),
                                           (GpuCurve, "gpu."), (DeploySpec, "deploy.")])
def test_every_field_is_on_the_page(model, prefix: str):
    missing = [f for f in model.model_fields if f"`{prefix}{f}`" not in PAGE and f != "name"]
    assert not missing, f"docs/profiles.md lacks {missing}"


def test_the_request_blocks_fields_are_on_the_page():
    assert all(f"`{f}`" in PAGE for f in RequestSpec.model_fields)
