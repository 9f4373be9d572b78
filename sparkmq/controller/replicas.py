"""ReplicasInfoManager: per broker group, its replicas, master, master epoch and SyncStateSet.

RocketMQ 5's controller state machine, without the network: each operation checks a request
against the state and returns a :class:`Outcome` (code, remark, header fields, body). An
outcome with ``changed`` altered the state, which the owner then persists. Broker ids are
handed out from 1 (``MixAll.FIRST_BROKER_CONTROLLER_ID``); the master registers with the
NameServers as brokerId 0, as in Java.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sparkmq.protocol import ResponseCode
from sparkmq.protocol.controller_bodies import (
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
)

FIRST_BROKER_CONTROLLER_ID = 1
# (clusterName, brokerName, brokerId) -> alive?
AlivePredicate = Callable[[str, str, int], bool]
# (clusterName, brokerName, brokerId) -> (epoch, maxOffset, electionPriority) of a live replica, or None
LiveInfoGetter = Callable[[str, str, int], "tuple[int, int, int] | None"]


@dataclass
class BrokerGroup:
    """``BrokerReplicaInfo`` + ``SyncStateInfo`` of one brokerName."""

    cluster: str
    name: str
    addresses: dict[int, str] = field(default_factory=dict)
    check_codes: dict[int, str] = field(default_factory=dict)
    master: int | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    def next_broker_id(self) -> int:
        return max(self.addresses, default=FIRST_BROKER_CONTROLLER_ID - 1) + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster,
            "brokerName": self.name,
            "brokerIdTable": {str(i): a for i, a in sorted(self.addresses.items())},
            "registerCheckCodes": {str(i): c for i, c in sorted(self.check_codes.items())},
            "masterBrokerId": self.master,
            "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> BrokerGroup:
        return cls(
            str(obj["clusterName"]),
            str(obj["brokerName"]),
            {int(i): str(a) for i, a in obj.get("brokerIdTable", {}).items()},
            {int(i): str(c) for i, c in obj.get("registerCheckCodes", {}).items()},
            None if obj.get("masterBrokerId") is None else int(obj["masterBrokerId"]),
            int(obj.get("masterEpoch", 0)),
            frozenset(int(i) for i in obj.get("syncStateSet", [])),
            int(obj.get("syncStateSetEpoch", 0)),
        )


@dataclass(frozen=True)
class Outcome:
    """An operation's answer; ``changed``: the state changed (persist it, maybe tell the brokers)."""

    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    changed: bool = False

    @classmethod
    def fail(cls, code: ResponseCode, remark: str) -> Outcome:
        return cls(code, remark)


def _fields(**values: object) -> dict[str, str]:
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in values.items() if v is not None}


class ReplicasInfoManager:
    """The controller's tables; every method runs on the controller's one event loop."""

    def __init__(self, enable_elect_unclean_master: bool = False) -> None:
        self.enable_elect_unclean_master = enable_elect_unclean_master
        self.groups: dict[str, BrokerGroup] = {}

    # -- persistence --------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"replicaInfoTable": [g.to_json() for _, g in sorted(self.groups.items())]}

    def load_json(self, obj: dict[str, Any]) -> None:
        self.groups = {g.name: g for g in map(BrokerGroup.from_json, obj.get("replicaInfoTable", []))}

    # -- registration -------------------------------------------------------------------------
    def next_broker_id(self, cluster: str, name: str) -> Outcome:
        group = self.groups.get(name)
        next_id = FIRST_BROKER_CONTROLLER_ID if group is None else group.next_broker_id()
        return Outcome(fields=_fields(clusterName=cluster, brokerName=name, nextBrokerId=next_id))

    def apply_broker_id(self, cluster: str, name: str, broker_id: int, check_code: str) -> Outcome:
        """Assign ``broker_id`` to the broker whose ``registerCheckCode`` is ``address;timestamp``."""
        address = check_code.split(";")[0]
        group = self.groups.get(name)
        answer = _fields(clusterName=cluster, brokerName=name)
        if group is None:
            if broker_id != FIRST_BROKER_CONTROLLER_ID:
                return Outcome.fail(
                    ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                    f"broker group {name} is not registered, yet a broker applies for brokerId {broker_id}",
                )
            group = self.groups[name] = BrokerGroup(cluster, name)
        elif broker_id in group.addresses and group.check_codes.get(broker_id) != check_code:
            return Outcome.fail(
                ResponseCode.CONTROLLER_BROKER_ID_INVALID, f"brokerId {broker_id} of {name} belongs to another broker"
            )
        group.addresses[broker_id], group.check_codes[broker_id] = address, check_code
        return Outcome(fields=answer, changed=True)

    def register_broker(self, cluster: str, name: str, broker_id: int, address: str, alive: AlivePredicate) -> Outcome:
        """A broker with an id says it is up: the master (if alive) and the SyncStateSet."""
        group = self.groups.get(name)
        if group is None or broker_id not in group.addresses:
            return Outcome.fail(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"brokerId {broker_id} has not applied for an id in broker group {name}",
            )
        changed = group.addresses[broker_id] != address
        group.addresses[broker_id] = address
        master = group.master
        answer = _fields(clusterName=cluster, brokerName=name)
        if master is not None and alive(cluster, name, master):
            answer |= _fields(
                masterBrokerId=master,
                masterAddress=group.addresses.get(master, ""),
                masterEpoch=group.master_epoch,
                syncStateSetEpoch=group.sync_state_set_epoch,
            )
        body = SyncStateSet(group.sync_state_set, group.sync_state_set_epoch).encode()
        return Outcome(fields=answer, body=body, changed=changed)

    # -- election -----------------------------------------------------------------------------
    def elect_master(
        self,
        name: str,
        broker_id: int | None,
        designate: bool,
        alive: AlivePredicate,
        live_info: LiveInfoGetter,
    ) -> Outcome:
        """``ReplicasInfoManager.electMaster`` with ``DefaultElectPolicy``.

        ``broker_id`` None: the controller elects because the master went away. A first
        election makes the asking broker master; later ones pick among live SyncStateSet
        members (all replicas only with ``enableElectUncleanMaster``) by epoch, then max offset,
        then election priority.
        """
        group = self.groups.get(name)
        if group is None:
            return Outcome.fail(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"broker group {name} is unknown")
        old = group.master
        first_time = old is None and group.master_epoch == 0 and group.sync_state_set_epoch == 0
        new: int | None = broker_id if first_time and broker_id is not None else None
        if new is None:
            prefer = broker_id if designate else None
            new = self._elect(group, group.sync_state_set, prefer, alive, live_info)
            if new is None and self.enable_elect_unclean_master:
                new = self._elect(group, frozenset(group.addresses), prefer, alive, live_info)
        if new is not None and new == old:
            return Outcome(
                ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                f"the master {old} of {name} is still alive: no election",
                self._master_fields(group),
                self._elect_body(group),
            )
        if new is not None:
            group.master = new
            group.master_epoch += 1
            group.sync_state_set = frozenset({new})
            group.sync_state_set_epoch += 1
            return Outcome(fields=self._master_fields(group), body=self._elect_body(group), changed=True)
        if broker_id is None:  # the controller's own election after the master left: record that it left
            changed = group.master is not None
            group.master = None
            return Outcome(
                ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                f"the master of {name} is gone and no replica can be elected",
                changed=changed,
            )
        return Outcome(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED, f"no replica of {name} can be elected")

    @staticmethod
    def _elect(
        group: BrokerGroup,
        candidates: Iterable[int],
        prefer: int | None,
        alive: AlivePredicate,
        live_info: LiveInfoGetter,
    ) -> int | None:
        live = [i for i in sorted(candidates) if alive(group.cluster, group.name, i)]
        if not live:
            return None
        if group.master in live and (prefer is None or prefer == group.master):
            return group.master
        if prefer is not None:
            return prefer if prefer in live else None

        def rank(broker_id: int) -> tuple[int, int, int, int]:
            epoch, max_offset, priority = live_info(group.cluster, group.name, broker_id) or (0, 0, 0)
            return (-epoch, -max_offset, priority, broker_id)

        return min(live, key=rank)

    def _master_fields(self, group: BrokerGroup) -> dict[str, str]:
        return _fields(
            masterBrokerId=group.master,
            masterAddress=group.addresses.get(group.master, "") if group.master is not None else "",
            masterEpoch=group.master_epoch,
            syncStateSetEpoch=group.sync_state_set_epoch,
        )

    def _elect_body(self, group: BrokerGroup) -> bytes:
        return ElectMasterResponseBody(group.cluster, group.name, dict(group.addresses), group.sync_state_set).encode()

    # -- SyncStateSet -------------------------------------------------------------------------
    def alter_sync_state_set(
        self, name: str, master: int, master_epoch: int, proposed: SyncStateSet, alive: AlivePredicate
    ) -> Outcome:
        """The master reports a new SyncStateSet; fenced by master and SyncStateSet epochs."""
        group = self.groups.get(name)
        if group is None:
            return Outcome.fail(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, f"broker group {name} is unknown")
        if proposed.members == group.sync_state_set:
            return Outcome.fail(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "the SyncStateSet is unchanged")
        if group.master != master:
            return Outcome.fail(
                ResponseCode.CONTROLLER_INVALID_MASTER, f"the master of {name} is {group.master}, not {master}"
            )
        if master_epoch != group.master_epoch:
            return Outcome.fail(
                ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                f"the master epoch of {name} is {group.master_epoch}, not {master_epoch}",
            )
        if proposed.epoch != group.sync_state_set_epoch:
            return Outcome.fail(
                ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                f"the SyncStateSet epoch of {name} is {group.sync_state_set_epoch}, not {proposed.epoch}",
            )
        for replica in proposed.members:
            if replica not in group.addresses:
                return Outcome.fail(ResponseCode.CONTROLLER_INVALID_REPLICAS, f"replica {replica} of {name} is unknown")
            if not alive(group.cluster, name, replica):
                return Outcome.fail(
                    ResponseCode.CONTROLLER_BROKER_NOT_ALIVE, f"replica {replica} of {name} is not alive"
                )
        if master not in proposed.members:
            return Outcome.fail(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "the new SyncStateSet must hold the master"
            )
        group.sync_state_set = proposed.members
        group.sync_state_set_epoch += 1
        new = SyncStateSet(group.sync_state_set, group.sync_state_set_epoch)
        return Outcome(fields=_fields(newSyncStateSetEpoch=new.epoch), body=new.encode(), changed=True)

    # -- queries ------------------------------------------------------------------------------
    def replica_info(self, name: str) -> Outcome:
        group = self.groups.get(name)
        if group is None:
            return Outcome.fail(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"broker group {name} is unknown")
        fields = _fields(
            masterBrokerId=group.master,
            masterAddress=group.addresses.get(group.master, "") if group.master is not None else "",
            masterEpoch=group.master_epoch,
        )
        return Outcome(fields=fields, body=SyncStateSet(group.sync_state_set, group.sync_state_set_epoch).encode())

    def sync_state_data(self, names: Iterable[str], alive: AlivePredicate) -> BrokerReplicasInfo:
        table: dict[str, ReplicasInfo] = {}
        for name in names:
            group = self.groups.get(name)
            if group is None:
                continue
            replicas = [
                ReplicaIdentity(name, i, a, alive(group.cluster, name, i)) for i, a in sorted(group.addresses.items())
            ]
            table[name] = ReplicasInfo(
                group.master,
                group.addresses.get(group.master, "") if group.master is not None else "",
                group.master_epoch,
                group.sync_state_set_epoch,
                tuple(r for r in replicas if r.broker_id in group.sync_state_set),
                tuple(r for r in replicas if r.broker_id not in group.sync_state_set),
            )
        return BrokerReplicasInfo(table)
