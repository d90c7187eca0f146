"""Open5GS control: subscriber documents in MongoDB (pymongo) and network-function config rendering.

Targets Open5GS v2.7.x (config format of v2.7.1+, subscriber schema_version 1)."""

from testbed.core.backend import (
    OpenedStore,
    StoreUnreachable,
    open_store,
    read_mongod,
    start_mongod,
    state_dir,
    stop_mongod,
)
from testbed.core.provision import ProvisionedUE, derive_keys, desired_ues
from testbed.core.store import ApplyPlan, Member, SubscriberStore
from testbed.core.subscriber import Subscriber, mask

__all__ = [
    "ApplyPlan",
    "Member",
    "OpenedStore",
    "ProvisionedUE",
    "StoreUnreachable",
    "Subscriber",
    "SubscriberStore",
    "derive_keys",
    "desired_ues",
    "mask",
    "open_store",
    "read_mongod",
    "start_mongod",
    "state_dir",
    "stop_mongod",
]
