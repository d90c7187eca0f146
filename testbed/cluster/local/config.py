"""The local cluster's configuration: one object, validated once, that the cluster and each part
it composes read (the balancer its ports, the launcher its replicas' host and work, the placement
its units), as Mininet passes one set of params to each node."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from testbed.clock import ScenarioClock
from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles import ServiceProfile, default_profiles
from testbed.profiles.paper import TOTAL_UNITS


@dataclass(frozen=True)
class LocalClusterConfig:
    """What a LocalCluster runs and where.

    `profiles` (default: the registry's) and `services` (default: every profile) say what runs;
    `initial` the replicas each starts with (a number for all, or per service; 1 otherwise) on a
    pool of `total_units`. `time_scale` divides every profile time (processing, startup) and the
    sampling interval, so a scaler period of 30 s becomes 30/time_scale s of wall time;
    `sleep_only` replicas spend that time without their handler's work (decoding, synthesis).
    The balancer listens on `host` (`ports` per service, `metrics_port`; 0: any free one) and
    advertises `advertise_host`; replicas listen on `replica_host`, log into `log_dir`, use
    espeak-ng for speech unless `use_espeak` is off, and emulate GPU `interference`. A replica
    that dies is replaced while `replace_dead`; `seed` fixes the replicas' drawn times. With
    `initial_warm` the initial replicas are ready once their servers listen, without their
    profile's startup (a run that waits for them before its load: a cell)."""

    profiles: dict[str, ServiceProfile] = None  # type: ignore[assignment]  # None: the registry's
    services: list[str] | None = None
    initial: dict[str, int] | int = 1
    total_units: int = TOTAL_UNITS
    time_scale: float = 1.0
    host: str = "127.0.0.1"
    ports: dict[str, int] | None = None
    metrics_port: int = 0
    replica_host: str = "127.0.0.1"
    advertise_host: str | None = None
    replace_dead: bool = True
    log_dir: Path | None = None
    seed: int = 0
    use_espeak: bool = True
    sleep_only: bool = False
    interference: bool = False
    initial_warm: bool = False

    def __post_init__(self) -> None:
        if self.profiles is None:
            object.__setattr__(self, "profiles", default_profiles())
        unknown = [s for s in self.services or () if s not in self.profiles]
        if unknown:
            raise ConfigError(
                [ConfigProblem("services", None, s, "no profile for this service") for s in unknown])
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ConfigError([ConfigProblem("cluster", None, "time_scale", "must be > 0")])

    @property
    def clock(self) -> ScenarioClock:
        """The cluster's time scale as a clock."""
        return ScenarioClock(self.time_scale)

    @property
    def names(self) -> list[str]:
        """The services that run: `services`, else every profile's."""
        return list(self.services or self.profiles)

    def initial_replicas(self, service: str) -> int:
        """The replicas `service` starts with.

        service: one of `names`."""
        return self.initial if isinstance(self.initial, int) else self.initial.get(service, 1)
