"""What the services and the dissertation say: the one service-profile model and the paper's numbers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from testbed.profiles.paper import SERVICES

if TYPE_CHECKING:
    from testbed.profiles.service import (
        HEADER_TIMEOUT_S,
        PACKAGED_PROFILES,
        GpuCurve,
        ServiceProfile,
        default_profiles,
        dump_profiles,
        gpu_stretches,
        load_profiles,
        profile_for,
        write_profiles,
    )

__all__ = [
    "HEADER_TIMEOUT_S",
    "PACKAGED_PROFILES",
    "SERVICES",
    "GpuCurve",
    "ServiceProfile",
    "default_profiles",
    "dump_profiles",
    "gpu_stretches",
    "load_profiles",
    "profile_for",
    "write_profiles",
]


def __getattr__(name: str) -> Any:
    # the models (pydantic, yaml) load on first use, not with `testbed.profiles.paper`: the CLI
    # reads the paper's numbers for its help and stays fast (bench/startup.py)
    if name in __all__:
        from testbed.profiles import service

        return getattr(service, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
