"""JSON bodies of RocketMQ 5's controller RPCs (automatic failover), with Java's field names.

* ``SyncStateSet``: ``{"syncStateSet":[1,2],"syncStateSetEpoch":3}`` (ALTER_SYNC_STATE_SET,
  REGISTER_BROKER, GET_REPLICA_INFO, NOTIFY_BROKER_ROLE_CHANGED);
* ``ElectMasterResponseBody``: ``{"brokerMemberGroup":{...},"syncStateSet":[2]}``;
* ``EpochEntryCache``: a broker's epochs (GET_BROKER_EPOCH_CACHE);
* ``BrokerReplicasInfo``: ``{"replicasInfoTable":{name:{...,"inSyncReplicas":[...]}}}``
  (CONTROLLER_GET_SYNC_STATE_DATA).

Example::

    >>> SyncStateSet.decode(SyncStateSet(frozenset({2, 1}), 3).encode())
    SyncStateSet(members=frozenset({1, 2}), epoch=3)
    >>> EpochEntry(2, 100).end_offset == JAVA_LONG_MAX
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Self

from .fastjson import as_list, as_object, dumps, get_bool, get_int, get_str, loads

JAVA_LONG_MAX = 2**63 - 1  # EpochEntry.endOffset of the open (newest) epoch


def _ids(value: object, path: str) -> frozenset[int]:
    return frozenset(get_int({"id": item}, "id", path) for item in as_list(value, path))


@dataclass(frozen=True, slots=True)
class SyncStateSet:
    """The replicas a master counts as in sync, and the epoch of that set."""

    members: frozenset[int]
    epoch: int

    def encode(self) -> bytes:
        return dumps({"syncStateSet": sorted(self.members), "syncStateSetEpoch": self.epoch}).encode()

    @classmethod
    def decode(cls, body: bytes) -> Self:
        obj = as_object(loads(body, what="SyncStateSet"), "SyncStateSet")
        return cls(
            _ids(obj.get("syncStateSet", []), "syncStateSet"), get_int(obj, "syncStateSetEpoch", "SyncStateSet", 0)
        )


@dataclass(frozen=True, slots=True)
class ElectMasterResponseBody:
    """The new SyncStateSet (the master alone) and the group's members (``BrokerMemberGroup``)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]
    sync_state_set: frozenset[int]

    def encode(self) -> bytes:
        group = {
            "cluster": self.cluster,
            "brokerName": self.broker_name,
            "brokerAddrs": {str(i): a for i, a in sorted(self.broker_addrs.items())},
        }
        return dumps({"brokerMemberGroup": group, "syncStateSet": sorted(self.sync_state_set)}).encode()

    @classmethod
    def decode(cls, body: bytes) -> Self:
        obj = as_object(loads(body, what="ElectMasterResponseBody"), "ElectMasterResponseBody")
        group = as_object(obj.get("brokerMemberGroup") or {}, "brokerMemberGroup")
        addrs = as_object(group.get("brokerAddrs") or {}, "brokerAddrs")
        return cls(
            get_str(group, "cluster", "brokerMemberGroup", ""),
            get_str(group, "brokerName", "brokerMemberGroup", ""),
            {int(k): str(v) for k, v in addrs.items() if str(k).lstrip("-").isdigit()},
            _ids(obj.get("syncStateSet", []), "syncStateSet"),
        )


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """One master term: its epoch and the CommitLog offset it started (and ended) at."""

    epoch: int
    start_offset: int
    end_offset: int = JAVA_LONG_MAX

    def to_json(self) -> dict[str, int]:
        return {"epoch": self.epoch, "startOffset": self.start_offset, "endOffset": self.end_offset}

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        obj = as_object(value, path)
        return cls(
            get_int(obj, "epoch", path),
            get_int(obj, "startOffset", path),
            get_int(obj, "endOffset", path, JAVA_LONG_MAX),
        )


@dataclass(frozen=True, slots=True)
class EpochEntryCache:
    """GET_BROKER_EPOCH_CACHE's answer: a broker's epochs and its CommitLog max offset."""

    cluster_name: str
    broker_name: str
    broker_id: int
    epoch_list: tuple[EpochEntry, ...]
    max_offset: int

    def encode(self) -> bytes:
        return dumps(
            {
                "clusterName": self.cluster_name,
                "brokerName": self.broker_name,
                "brokerId": self.broker_id,
                "epochList": [e.to_json() for e in self.epoch_list],
                "maxOffset": self.max_offset,
            }
        ).encode()

    @classmethod
    def decode(cls, body: bytes) -> Self:
        obj = as_object(loads(body, what="EpochEntryCache"), "EpochEntryCache")
        entries = as_list(obj.get("epochList", []), "epochList")
        return cls(
            get_str(obj, "clusterName", "EpochEntryCache", ""),
            get_str(obj, "brokerName", "EpochEntryCache", ""),
            get_int(obj, "brokerId", "EpochEntryCache", 0),
            tuple(EpochEntry.from_json(e, f"epochList[{i}]") for i, e in enumerate(entries)),
            get_int(obj, "maxOffset", "EpochEntryCache", 0),
        )


@dataclass(frozen=True, slots=True)
class ReplicaIdentity:
    broker_name: str
    broker_id: int
    broker_address: str
    alive: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "brokerId": self.broker_id,
            "brokerAddress": self.broker_address,
            "alive": self.alive,
        }

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        obj = as_object(value, path)
        return cls(
            get_str(obj, "brokerName", path, ""),
            get_int(obj, "brokerId", path),
            get_str(obj, "brokerAddress", path, ""),
            get_bool(obj, "alive", path, False),
        )


@dataclass(frozen=True, slots=True)
class ReplicasInfo:
    """One broker group as the controller sees it."""

    master_broker_id: int | None
    master_address: str
    master_epoch: int
    sync_state_set_epoch: int
    in_sync_replicas: tuple[ReplicaIdentity, ...] = ()
    not_in_sync_replicas: tuple[ReplicaIdentity, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "masterBrokerId": self.master_broker_id,
            "masterAddress": self.master_address,
            "masterEpoch": self.master_epoch,
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "inSyncReplicas": [r.to_json() for r in self.in_sync_replicas],
            "notInSyncReplicas": [r.to_json() for r in self.not_in_sync_replicas],
        }

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        obj = as_object(value, path)
        master = obj.get("masterBrokerId")
        return cls(
            None if master is None else get_int(obj, "masterBrokerId", path),
            get_str(obj, "masterAddress", path, "") or "",
            get_int(obj, "masterEpoch", path, 0),
            get_int(obj, "syncStateSetEpoch", path, 0),
            tuple(ReplicaIdentity.from_json(r, path) for r in as_list(obj.get("inSyncReplicas", []), path)),
            tuple(ReplicaIdentity.from_json(r, path) for r in as_list(obj.get("notInSyncReplicas", []), path)),
        )


@dataclass(frozen=True, slots=True)
class BrokerReplicasInfo:
    """CONTROLLER_GET_SYNC_STATE_DATA's answer: each asked broker group's replicas."""

    replicas_info_table: dict[str, ReplicasInfo] = field(default_factory=dict)

    def encode(self) -> bytes:
        table = {name: info.to_json() for name, info in sorted(self.replicas_info_table.items())}
        return dumps({"replicasInfoTable": table}).encode()

    @classmethod
    def decode(cls, body: bytes) -> Self:
        obj = as_object(loads(body, what="BrokerReplicasInfo"), "BrokerReplicasInfo")
        table = as_object(obj.get("replicasInfoTable") or {}, "replicasInfoTable")
        return cls({name: ReplicasInfo.from_json(info, f"replicasInfoTable.{name}") for name, info in table.items()})


def decode_broker_names(body: bytes) -> list[str]:
    """CONTROLLER_GET_SYNC_STATE_DATA's request body: a JSON list of broker names."""
    return [
        get_str({"name": n}, "name", "brokerNames") for n in as_list(loads(body, what="brokerNames"), "brokerNames")
    ]


__all__ = [
    "JAVA_LONG_MAX",
    "BrokerReplicasInfo",
    "ElectMasterResponseBody",
    "EpochEntry",
    "EpochEntryCache",
    "ReplicaIdentity",
    "ReplicasInfo",
    "SyncStateSet",
    "decode_broker_names",
]
