"""What the services and the dissertation say: the one service-profile model and the paper's numbers."""

from testbed.profiles.service import (
    SERVICES,
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
