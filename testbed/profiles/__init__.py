"""What the services and the dissertation say: the one service-profile model, the service registry
and the paper's numbers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from testbed.profiles.paper import SERVICES

if TYPE_CHECKING:
    from testbed.profiles.parts import DeploySpec, RequestSpec, RuleThresholds
    from testbed.profiles.registry import (
        PACKAGED_PROFILES,
        default_profiles,
        load_profiles,
        profile_for,
        register_service,
        services,
        unregister_service,
    )
    from testbed.profiles.service import (
        HEADER_TIMEOUT_S,
        GpuCurve,
        ServiceProfile,
        dump_profiles,
        gpu_stretches,
        write_profiles,
    )

_HOMES = {
    "parts": ("DeploySpec", "RequestSpec", "RuleThresholds"),
    "registry": ("PACKAGED_PROFILES", "default_profiles", "load_profiles", "profile_for",
                 "register_service", "services", "unregister_service"),
    "service": ("HEADER_TIMEOUT_S", "GpuCurve", "ServiceProfile", "dump_profiles", "gpu_stretches",
                "write_profiles"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "HEADER_TIMEOUT_S",
    "PACKAGED_PROFILES",
    "SERVICES",
    "DeploySpec",
    "GpuCurve",
    "RequestSpec",
    "RuleThresholds",
    "ServiceProfile",
    "default_profiles",
    "dump_profiles",
    "gpu_stretches",
    "load_profiles",
    "profile_for",
    "register_service",
    "services",
    "unregister_service",
    "write_profiles",
]


def __getattr__(name: str) -> Any:
    # the models (pydantic, yaml) load on first use, not with `testbed.profiles.paper`: the CLI
    # reads the paper's numbers for its help and stays fast (bench/startup.py)
    module = _HOME_OF.get(name)
    if module is not None:
        import importlib

        return getattr(importlib.import_module(f"testbed.profiles.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
