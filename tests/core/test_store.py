"""SubscriberStore: round trip, idempotent apply, all-or-nothing batches, membership."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from testbed.core.provision import desired_ues
from testbed.core.store import SubscriberStore
from testbed.errors import StateError
from tests.core.core_specs import THREE_SLICES, spec_from


def _docs(store: SubscriberStore) -> dict[str, dict[str, Any]]:
    return {d["imsi"]: d for d in store.collection.find({})}


def test_round_trip(store, spec):
    ues = desired_ues(spec)
    plan = store.apply(ues)
    assert plan.summary() == "4 created, 0 updated, 0 unchanged"
    for ue in ues:
        got = store.get(ue.imsi)
        assert got == ue.subscriber
        raw = store.raw(ue.imsi)
        assert raw["security"]["k"] == ue.subscriber.security.k
        assert raw["slice"][0]["sd"] == "000001" if ue.slice == "ai" else "000002"
    assert store.imsis() == sorted(u.imsi for u in ues)
    if type(store.collection).__module__.startswith("pymongo"):  # montydb cannot list indexes
        index = store.collection.index_information()["imsi_1"]
        assert index["key"] == [("imsi", 1)] and index["unique"] is True


def test_apply_is_idempotent(store, spec):
    store.apply(desired_ues(spec))
    before = _docs(store)
    plan = store.apply(desired_ues(spec))
    assert plan.summary() == "0 created, 0 updated, 4 unchanged"
    assert _docs(store) == before  # not even an _id changed


def test_changed_spec_updates_only_what_changed_and_keeps_sqn(store):
    spec = spec_from(THREE_SLICES)
    store.apply(desired_ues(spec))
    store.collection.update_one({"imsi": "001010000000500"}, {"$set": {"security.sqn": 4242,
                                                                       "imeisv": ["4370816125816151"]}})
    changed = spec_from(THREE_SLICES.replace("count: 2, imsi_start", "count: 2, ambr_uplink_mbit: 50, "
                                             "imsi_start"))
    plan = store.apply(desired_ues(changed))
    assert plan.summary() == "0 created, 2 updated, 4 unchanged"
    assert all("ambr.uplink.value" in c.fields for _, c in plan.update)
    raw = store.raw("001010000000500")
    assert raw["ambr"]["uplink"] == {"value": 50, "unit": 2}
    assert raw["security"]["sqn"] == 4242 and raw["imeisv"] == ["4370816125816151"]


def test_extras_are_reported_and_pruned_only_on_request(store):
    spec = spec_from(THREE_SLICES)
    store.apply(desired_ues(spec))
    fewer = spec_from(THREE_SLICES.replace("count: 3", "count: 1"))
    plan = store.apply(desired_ues(fewer))
    assert plan.extra == ["001010000000002", "001010000000003"] and len(store.imsis()) == 6
    assert "2 in the store but not in the spec" in plan.summary()
    plan = store.apply(desired_ues(fewer), prune=True)
    assert plan.summary() == "0 created, 0 updated, 4 unchanged, 2 deleted"
    assert len(store.imsis()) == 4


class FailingCollection:
    """Test double around a real collection: the n-th write raises, as a dropped link would."""

    def __init__(self, real: Any, fail_at: int):
        self.real, self.fail_at, self.writes = real, fail_at, 0

    def _write(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        if self.writes == self.fail_at:
            raise ConnectionError("link to MongoDB lost (injected)")
        return getattr(self.real, name)(*args, **kwargs)

    def insert_one(self, *a: Any, **k: Any) -> Any:
        return self._write("insert_one", *a, **k)

    def insert_many(self, docs: list[Any], ordered: bool = True) -> Any:
        for doc in docs:  # one write per document, so a batch can fail half-way through
            self._write("insert_one", doc)

    def update_one(self, *a: Any, **k: Any) -> Any:
        return self._write("update_one", *a, **k)

    def delete_one(self, *a: Any, **k: Any) -> Any:
        return self._write("delete_one", *a, **k)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.mark.parametrize("fail_at", [1, 3, 5])
def test_failure_mid_batch_leaves_the_store_as_it_was(store, fail_at):
    spec = spec_from(THREE_SLICES)
    store.apply(desired_ues(spec)[:4])  # ai x3 and the first be UE exist
    store.collection.update_one({"imsi": "001010000000001"}, {"$set": {"security.sqn": 7}})
    before = copy.deepcopy(_docs(store))
    # creates 2, updates the 3 ai UEs (new 5QI), prunes nothing -> 5 writes, one fails
    changed = spec_from(THREE_SLICES.replace("five_qi: 7", "five_qi: 8"))
    flaky = SubscriberStore(FailingCollection(store.collection, fail_at))
    with pytest.raises(StateError, match="rolled back") as err:
        flaky.apply(desired_ues(changed))
    assert "injected" in str(err.value)
    after = _docs(store)
    assert after.keys() == before.keys()
    assert {k: {f: v for f, v in d.items() if f != "_id"} for k, d in after.items()} == \
        {k: {f: v for f, v in d.items() if f != "_id"} for k, d in before.items()}
    # and the same batch succeeds once the link is back
    assert store.apply(desired_ues(changed)).summary() == "2 created, 3 updated, 1 unchanged"


def test_failure_message_never_carries_a_key(store, spec):
    class KeyLeakingCollection(FailingCollection):
        def insert_many(self, docs: Any, *a: Any, **k: Any) -> Any:
            raise ValueError(f"cannot write {docs[0]['security']['k']}")

    ues = desired_ues(spec)
    with pytest.raises(StateError) as err:
        SubscriberStore(KeyLeakingCollection(store.collection, 0)).apply(ues)
    assert ues[0].subscriber.security.k not in str(err.value) and "<hidden>" in str(err.value)
    assert store.imsis() == []


def test_delete_is_all_or_nothing(store, spec):
    store.apply(desired_ues(spec))
    with pytest.raises(StateError, match="001010000009999"):
        store.delete(["001010000000001", "001010000009999"])
    assert len(store.imsis()) == 4
    assert store.delete(["001010000000001", "001010000000002"]) == 2
    assert store.imsis() == ["001010000001001", "001010000001002"]


def test_membership_places_subscribers_in_slices_and_groups(store):
    spec = spec_from(THREE_SLICES)
    store.apply(desired_ues(spec))
    store.collection.insert_one({**desired_ues(spec)[0].subscriber.to_document(), "imsi": "001010000077777"})
    members = {m.imsi: m for m in store.membership(spec)}
    assert members["001010000000500"].slice == "be" and members["001010000000500"].group == "be"
    assert str(members["001010000000002"].address) == "10.45.0.3"
    assert members["001010000077777"].group is None
    by_slice = store.ue_groups_by_slice(spec)
    assert [m.imsi for m in by_slice["ai"]["ai"]] == ["001010000000001", "001010000000002",
                                                      "001010000000003"]
    assert set(by_slice["iot"]) == {"iot"} and by_slice["iot"]["iot"][0].address is None


def test_invalid_document_in_store_is_named(store, spec):
    store.collection.insert_one({"imsi": "001010000000001", "security": {"k": "zz"}})
    with pytest.raises(StateError, match=r"001010000000001.*security"):
        store.list()
    # apply repairs it rather than tripping over it
    assert store.apply(desired_ues(spec)).summary() == "3 created, 1 updated, 0 unchanged"
