"""The Open5GS subscriber document (database `open5gs`, collection `subscribers`) as a typed model.

Targets Open5GS v2.7.x (the document shape is the same in v2.8.0). Field names and defaults follow
the project's own provisioning tool `misc/db/open5gs-dbctl` and the WebUI: `imsi`, `security`
(k, opc|op, amf, sqn), UE-level `ambr`, and `slice[]` with `session[]` (DNN `name`, PDU `type`,
`qos` with 5QI `index` and `arp`, session `ambr`, `pcc_rule[]`, optional static `ue.addr`).
Bitrates are value + unit, unit 0=bps 1=Kbps 2=Mbps 3=Gbps 4=Tbps.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA_VERSION = 1
SESSION_TYPES = {"ipv4": 1, "ipv6": 2, "ipv4v6": 3}
UNITS = ("bps", "Kbps", "Mbps", "Gbps", "Tbps")
_HEX32 = re.compile(r"^[0-9a-f]{32}$")

# Fields the core itself changes (sqn on every authentication; imeisv, purge_flag, mme_host when
# a UE attaches): `apply` never overwrites them and never counts them as a difference.
CORE_OWNED = ("imeisv", "mme_host", "mm_realm", "purge_flag")


class _Doc(BaseModel):
    # Documents written by other tools carry `_id`s and extra fields; keep them out of the model.
    model_config = ConfigDict(extra="ignore", frozen=True)


class Bitrate(_Doc):
    value: int = Field(ge=0)
    unit: int = Field(ge=0, le=4)

    @classmethod
    def from_mbit(cls, mbit: float) -> Bitrate:
        """The largest unit that keeps the value an integer (1000 Mbit/s -> 1 Gbps)."""
        bps = round(mbit * 1_000_000)
        unit = 0
        while unit < 4 and bps % 1000 == 0 and bps > 0:
            bps //= 1000
            unit += 1
        return cls(value=bps, unit=unit)

    @property
    def bps(self) -> int:
        return self.value * 1000**self.unit

    def __str__(self) -> str:
        return f"{self.value} {UNITS[self.unit]}"


class Ambr(_Doc):
    downlink: Bitrate
    uplink: Bitrate


class Arp(_Doc):
    priority_level: int = Field(8, ge=1, le=15)
    pre_emption_capability: int = Field(1, ge=1, le=2)  # 1 disabled, 2 enabled (dbctl default 1)
    pre_emption_vulnerability: int = Field(2, ge=1, le=2)  # 1 disabled, 2 enabled (dbctl default 2)


class Qos(_Doc):
    index: int = Field(9, ge=1, le=255)  # the 5QI
    arp: Arp = Arp()


class UeAddress(_Doc):
    addr: ipaddress.IPv4Address | None = None


class Session(_Doc):
    name: str  # the DNN
    type: int = Field(SESSION_TYPES["ipv4v6"], ge=1, le=3)
    qos: Qos = Qos()
    ambr: Ambr
    ue: UeAddress | None = None
    pcc_rule: list[dict[str, Any]] = Field(default_factory=list)


class SliceEntry(_Doc):
    sst: int = Field(ge=1, le=255)
    sd: str | None = None  # 6 lower-case hex digits; absent means "no SD"
    default_indicator: bool = True
    session: list[Session] = Field(min_length=1)

    @field_validator("sd")
    @classmethod
    def _sd(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-fA-F]{6}", value):
            raise ValueError(f"sd must be 6 hex digits, got {value!r}")
        return None if value is None else value.lower()

    @property
    def snssai(self) -> tuple[int, str | None]:
        return (self.sst, self.sd)


class Security(_Doc):
    k: str
    opc: str | None = None
    op: str | None = None
    amf: str = "8000"
    sqn: int = 0

    @field_validator("k", "opc", "op")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not _HEX32.match(value.lower()):
            raise ValueError("must be 32 hex digits")
        return None if value is None else value.lower()


class Subscriber(_Doc):
    """One subscriber document; `to_document()` is exactly what goes into MongoDB."""

    imsi: str = Field(pattern=r"^[0-9]{15}$")
    security: Security
    ambr: Ambr
    slice: list[SliceEntry] = Field(min_length=1)
    msisdn: list[str] = Field(default_factory=list)
    access_restriction_data: int = 32
    subscriber_status: int = 0
    network_access_mode: int = 0
    subscribed_rau_tau_timer: int = 12
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Subscriber:
        return cls.model_validate(doc)

    def to_document(self) -> dict[str, Any]:
        """The full document for an insert: managed fields plus the empty core-owned lists."""
        doc = self.managed_fields()
        doc["security"]["sqn"] = self.security.sqn
        for name in CORE_OWNED:
            doc[name] = []
        doc["__v"] = 0
        return doc

    def managed_fields(self) -> dict[str, Any]:
        """What `apply` owns and compares: everything but `_id`s, sqn and core-owned fields."""
        doc = self.model_dump(mode="json", exclude_none=True)
        doc["security"].pop("sqn", None)
        for entry in doc["slice"]:
            for session in entry["session"]:
                if session.get("ue") == {}:
                    del session["ue"]
        return doc

    def masked(self) -> dict[str, Any]:
        """The document with K, OPc and OP replaced, for display and logs."""
        doc = self.to_document()
        for key in ("k", "opc", "op"):
            if doc["security"].get(key):
                doc["security"][key] = mask(doc["security"][key])
        return doc

    @property
    def snssais(self) -> list[tuple[int, str | None]]:
        return [s.snssai for s in self.slice]

    @property
    def address(self) -> ipaddress.IPv4Address | None:
        """The static IPv4 address of the first session that has one."""
        for entry in self.slice:
            for session in entry.session:
                if session.ue is not None and session.ue.addr is not None:
                    return session.ue.addr
        return None


def mask(secret: str) -> str:
    """Hide a key but keep a short fingerprint, so two masked keys can still be told apart."""
    return "hidden:sha256:" + hashlib.sha256(secret.encode()).hexdigest()[:8]
