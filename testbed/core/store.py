"""Subscriber CRUD on a pymongo-style collection: plan, idempotent all-or-nothing apply, list,
delete, and the slice membership the data plane reads.

Neither a standalone mongod nor the embedded store has multi-document transactions, so a batch
is made atomic by hand: snapshot the documents it will touch, write, and on any failure put the
snapshot back and remove what the batch inserted (a compensating restore).
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from testbed.config import TestbedSpec
from testbed.core.provision import ProvisionedUE
from testbed.core.subscriber import Subscriber
from testbed.errors import StateError

log = logging.getLogger(__name__)
_HEX32 = re.compile(r"\b[0-9a-fA-F]{32}\b")
INSERT_CHUNK = 500  # one insert_many per chunk: ~40x faster than insert_one on the embedded store


@dataclass
class Change:
    imsi: str
    fields: list[str]  # dotted paths that differ, never values


@dataclass
class ApplyPlan:
    """What an apply would do; `apply` returns the same object once it is done."""

    create: list[Subscriber] = field(default_factory=list)
    update: list[tuple[Subscriber, Change]] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # in the store, not in the spec
    delete: list[str] = field(default_factory=list)  # extras that a prune removes

    @property
    def writes(self) -> int:
        return len(self.create) + len(self.update) + len(self.delete)

    def summary(self) -> str:
        text = f"{len(self.create)} created, {len(self.update)} updated, {len(self.unchanged)} unchanged"
        if self.delete:
            text += f", {len(self.delete)} deleted"
        elif self.extra:
            text += f" ({len(self.extra)} in the store but not in the spec)"
        return text


@dataclass(frozen=True)
class Member:
    """One UE as the store knows it, placed in the spec's slices and groups."""

    imsi: str
    slice: str | None  # None: its S-NSSAI matches no slice of the spec
    group: str | None  # None: its IMSI is outside every group's range
    address: ipaddress.IPv4Address | None


class SubscriberStore:
    """The `subscribers` collection of an Open5GS database (pymongo API: real or embedded)."""

    def __init__(self, collection: Any):
        self.collection = collection

    def ensure_index(self) -> None:
        self.collection.create_index("imsi", unique=True)

    # ---- reading -------------------------------------------------------------------------
    def raw(self, imsi: str) -> dict[str, Any] | None:
        return self.collection.find_one({"imsi": imsi})

    def get(self, imsi: str) -> Subscriber | None:
        doc = self.raw(imsi)
        return None if doc is None else _parse(doc)

    def list(self) -> list[Subscriber]:
        docs = sorted(self.collection.find({}), key=lambda d: str(d.get("imsi", "")))
        return [_parse(d) for d in docs]

    def imsis(self) -> list[str]:
        return sorted(str(d["imsi"]) for d in self.collection.find({}, {"imsi": 1}))

    # ---- planning and writing ------------------------------------------------------------
    def plan(self, desired: Iterable[ProvisionedUE | Subscriber], prune: bool = False) -> ApplyPlan:
        subs = [d.subscriber if isinstance(d, ProvisionedUE) else d for d in desired]
        existing = {str(d["imsi"]): d for d in self.collection.find({})}
        plan = ApplyPlan()
        for sub in subs:
            old = existing.get(sub.imsi)
            if old is None:
                plan.create.append(sub)
                continue
            paths = _differences(_managed_or_none(old), sub.managed_fields())
            if paths:
                plan.update.append((sub, Change(sub.imsi, paths)))
            else:
                plan.unchanged.append(sub.imsi)
        wanted = {s.imsi for s in subs}
        plan.extra = sorted(set(existing) - wanted)
        if prune:
            plan.delete = list(plan.extra)
        return plan

    def apply(self, desired: Iterable[ProvisionedUE | Subscriber], prune: bool = False) -> ApplyPlan:
        """Make the store hold exactly `desired` (plus extras unless `prune`); all or nothing."""
        plan = self.plan(desired, prune)
        if plan.writes == 0:
            return plan
        self.ensure_index()
        touched = [s.imsi for s, _ in plan.update] + plan.delete
        self._batch(plan.create, [s for s, _ in plan.update], plan.delete, touched)
        log.info("subscribers applied: %s", plan.summary())
        return plan

    def delete(self, imsis: Iterable[str]) -> int:
        """Delete the given subscribers, all or nothing; unknown IMSIs are an error."""
        imsis = list(imsis)
        present = set(self.imsis())
        missing = [i for i in imsis if i not in present]
        if missing:
            raise StateError(f"no subscriber with IMSI {', '.join(missing)}; nothing deleted")
        self._batch([], [], imsis, imsis)
        return len(imsis)

    def _batch(self, create: list[Subscriber], update: list[Subscriber], delete: list[str],
               touched: list[str]) -> None:
        # one scan: on the embedded store a filtered find costs more than reading everything
        wanted = set(touched)
        stored = {str(d["imsi"]): d for d in self.collection.find({}) if str(d.get("imsi")) in wanted}
        snapshot = {imsi: stored.get(imsi) for imsi in touched}
        inserted: list[str] = []  # attempted: an insert_many that fails may have written part
        try:
            for first in range(0, len(create), INSERT_CHUNK):
                chunk = create[first:first + INSERT_CHUNK]
                inserted += [s.imsi for s in chunk]
                self.collection.insert_many([s.to_document() for s in chunk], ordered=True)
            for sub in update:
                self.collection.update_one({"imsi": sub.imsi}, _update_of(sub))
            for imsi in delete:
                self.collection.delete_one({"imsi": imsi})
        except Exception as exc:
            self._restore(snapshot, inserted, exc)
            raise StateError(
                f"subscriber batch failed and was rolled back, the store is as before "
                f"({_scrub(exc)})"
            ) from None

    def _restore(self, snapshot: dict[str, dict[str, Any] | None], inserted: list[str],
                 cause: BaseException) -> None:
        try:
            for imsi in inserted:
                self.collection.delete_many({"imsi": imsi})
            for imsi, doc in snapshot.items():
                if doc is None:
                    self.collection.delete_many({"imsi": imsi})
                else:
                    self.collection.replace_one({"imsi": imsi}, doc, upsert=True)
        except Exception as exc:
            raise StateError(
                f"subscriber batch failed ({_scrub(cause)}) and the rollback failed too "
                f"({_scrub(exc)}): check IMSIs {', '.join(sorted([*inserted, *snapshot]))}"
            ) from None

    # ---- what the data plane reads -------------------------------------------------------
    def membership(self, spec: TestbedSpec) -> list[Member]:
        """Every subscriber placed in the spec's slices (by S-NSSAI) and groups (by IMSI range)."""
        by_snssai = {s.snssai: s.name for s in spec.slices}
        group_of = {imsi: g.name for g in spec.ue_groups for imsi in spec.imsis_of(g)}
        out = []
        for sub in self.list():
            slice_name = next((by_snssai[n] for n in sub.snssais if n in by_snssai), None)
            out.append(Member(sub.imsi, slice_name, group_of.get(sub.imsi), sub.address))
        return out

    def ue_groups_by_slice(self, spec: TestbedSpec) -> dict[str, dict[str, list[Member]]]:
        """slice name -> group name -> members, for the members the spec can place."""
        out: dict[str, dict[str, list[Member]]] = {s.name: {} for s in spec.slices}
        for m in self.membership(spec):
            if m.slice is not None and m.group is not None:
                out[m.slice].setdefault(m.group, []).append(m)
        return out


def _parse(doc: dict[str, Any]) -> Subscriber:
    try:
        return Subscriber.from_document(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise StateError(f"subscriber {doc.get('imsi')!r} in the store is not a valid Open5GS "
                         f"document: {where}: {first['msg']}") from None


def _managed_or_none(doc: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return Subscriber.from_document(doc).managed_fields()
    except ValidationError:
        return None  # written by something else and malformed: apply replaces its fields


def _update_of(sub: Subscriber) -> dict[str, Any]:
    """$set the managed fields; security field by field so the core's sqn survives."""
    managed = sub.managed_fields()
    security = managed.pop("security")
    update: dict[str, Any] = {"$set": {**managed, **{f"security.{k}": v for k, v in security.items()}}}
    gone = [k for k in ("op", "opc") if k not in security]
    if gone:
        update["$unset"] = {f"security.{k}": "" for k in gone}
    return update


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    if old is None:
        return [path or "<document>"]
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            out += _differences(old.get(key), new.get(key), f"{path}.{key}" if path else key) \
                if key in old and key in new else [f"{path}.{key}" if path else key]
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            out += _differences(a, b, f"{path}[{i}]")
        return out
    return [] if old == new else [path]


def _scrub(exc: BaseException) -> str:
    """An exception as one line, with anything that looks like a key hidden."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return _HEX32.sub("<hidden>", f"{type(exc).__name__}: {text}")[:300]
