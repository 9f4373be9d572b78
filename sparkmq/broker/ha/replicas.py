"""ReplicasManager: a broker in controller mode (``enableControllerMode=true``), RocketMQ 5's design.

The broker gets its brokerId from the controller once (GET_NEXT_BROKER_ID, APPLY_BROKER_ID;
kept in ``brokerIdentity`` in the store root), registers (CONTROLLER_REGISTER_BROKER),
heart-beats (BROKER_HEARTBEAT every ``brokerHeartbeatInterval``) and takes the role the
controller gives it: from the register answer, from an election it asks for when the group has
no master, from NOTIFY_BROKER_ROLE_CHANGED, or from GET_REPLICA_INFO every
``syncBrokerMetadataPeriod``.

* master at epoch E: stop following, cut a torn last record, append ``(E, max offset)`` to the
  epoch file, accept writes, register with the NameServers as brokerId 0; review the
  SyncStateSet every ``checkSyncStateSetPeriod`` (replicas that lag longer than
  ``haMaxTimeSlaveNotCatchup`` leave, caught-up ones join) and report changes
  (CONTROLLER_ALTER_SYNC_STATE_SET);
* replica: before each HA link, fetch the master's epochs (GET_BROKER_EPOCH_CACHE), truncate
  the log to the consistent point, copy the epochs, then follow on RocketMQ 4.x's HA wire.

A SYNC_MASTER send waits for the acks :class:`~sparkmq.broker.ha.acks.SlaveAcks` asks for. A
joining replica counts for acks from the moment the master decides to add it (Java's
``markSynchronizingSyncStateSet``), a leaving one only once the controller accepted: an
acknowledged message is always on every replica the controller may elect.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sparkmq.broker.config import BrokerConfig
from sparkmq.broker.ha.acks import now_ms
from sparkmq.broker.ha.epochs import EpochFile, consistent_point, with_ends
from sparkmq.broker.ha.service import HAService
from sparkmq.config_file import ConfigFile
from sparkmq.errors import ConfigError, RemoteError, SparkmqError
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.controller_bodies import ElectMasterResponseBody, EpochEntryCache, SyncStateSet
from sparkmq.remoting import RemotingClient, RemotingConnection
from sparkmq.remoting.periodic import run_every, run_once, stop_tasks

logger = logging.getLogger(__name__)
CONTROLLER_TIMEOUT_S = 3.0
IDENTITY_FILE = "brokerIdentity"
# (is_master, brokerId to register with the NameServers, the master's address)
RoleListener = Callable[[bool, int, str], Awaitable[None]]


class ReplicasManager:
    """One broker's side of the controller protocol."""

    def __init__(self, config: BrokerConfig, ha: HAService, client: RemotingClient, on_role: RoleListener) -> None:
        self.config = config
        self.ha = ha
        self.store = ha.store
        self.client = client
        self.on_role = on_role
        self.epochs = EpochFile(config.store_path_root_dir)
        self._identity: ConfigFile[dict[str, Any]] = ConfigFile(
            config.store_path_root_dir / IDENTITY_FILE, json.loads, json.dumps, ConfigError
        )
        self.broker_id: int | None = None
        self.registered = False
        self.master_epoch = 0
        self.master_broker_id: int | None = None
        self.master_address = ""
        self.sync_state_set: frozenset[int] = frozenset()
        self.sync_state_set_epoch = 0
        self._controller_leader = ""
        self._lock = asyncio.Lock()  # role changes and SyncStateSet reports, one at a time
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def is_master(self) -> bool:
        return self.broker_id is not None and self.master_broker_id == self.broker_id

    async def start(self) -> None:
        self.epochs.load()
        identity = self._identity.load()
        if identity is not None:
            self.broker_id = int(identity["brokerId"])
        await run_once(self.register, f"broker {self.config.broker_name} controller registration")
        cfg = self.config
        for period_ms, action, name in (
            (cfg.broker_heartbeat_interval, self.heartbeat, "controller-heartbeat"),
            (cfg.sync_broker_metadata_period, self.sync_metadata, "controller-metadata"),
            (cfg.check_sync_state_set_period, self.check_sync_state_set, "sync-state-set"),
        ):
            task = run_every(period_ms / 1000, action, f"broker {cfg.broker_name} {name}")
            self._tasks.append(asyncio.get_running_loop().create_task(task, name=f"sparkmq-{name}"))

    async def close(self) -> None:
        await stop_tasks(self._tasks, f"broker {self.config.broker_name}")

    # -- the controller's RPCs ----------------------------------------------------------------
    async def _invoke(self, code: RequestCode, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
        """Ask the controller leader: the one of ``controllerAddr`` that last answered as leader, then the others."""
        last: SparkmqError | None = None
        addresses = self.config.controller_addresses()
        for address in sorted(addresses, key=lambda a: a != self._controller_leader):
            try:
                response = await self.client.invoke(address, code, fields, body, timeout=CONTROLLER_TIMEOUT_S)
            except SparkmqError as exc:
                last = exc
                continue
            if response.code != ResponseCode.CONTROLLER_NOT_LEADER:
                self._controller_leader = address
                return response
            last = RemoteError(f"controller {address} is not the leader", code=response.code, retriable=True)
        assert last is not None
        raise last

    def _names(self) -> dict[str, str]:
        return {"clusterName": self.config.broker_cluster_name, "brokerName": self.config.broker_name}

    async def _apply_broker_id(self, broker_id: int | None = None) -> int:
        """A new id from the controller, or ``broker_id`` (this broker's) again for a controller that lost it."""
        if broker_id is None:
            response = await self._invoke(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, self._names())
            _check(response, "GET_NEXT_BROKER_ID")
            broker_id = int(response.ext_fields["nextBrokerId"])
        check_code = f"{self.config.address};{int(time.time() * 1000)}"
        fields = self._names() | {"appliedBrokerId": str(broker_id), "registerCheckCode": check_code}
        _check(await self._invoke(RequestCode.CONTROLLER_APPLY_BROKER_ID, fields), "APPLY_BROKER_ID")
        await asyncio.to_thread(self._identity.persist, self._names() | {"brokerId": broker_id})
        logger.info("broker %s: the controller assigned brokerId %d", self.config.broker_name, broker_id)
        return broker_id

    async def register(self) -> None:
        """Get an id if needed, register, and take the role the answer implies (or ask for an election)."""
        if self.broker_id is None:
            self.broker_id = await self._apply_broker_id()
        fields = self._names() | {
            "brokerId": str(self.broker_id),
            "brokerAddress": self.config.address,
            "invokeTime": str(int(time.time() * 1000)),
        }
        response = await self._invoke(RequestCode.CONTROLLER_REGISTER_BROKER, fields)
        if response.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED:  # a controller without our id
            await self._apply_broker_id(self.broker_id)
            response = await self._invoke(RequestCode.CONTROLLER_REGISTER_BROKER, fields)
        _check(response, "CONTROLLER_REGISTER_BROKER")
        self.registered = True
        await self.heartbeat()  # alive before any election counts on it
        await self._follow_answer(response, SyncStateSet.decode(response.body) if response.body else None)

    async def _follow_answer(self, response: RemotingCommand, sync: SyncStateSet | None) -> None:
        fields = response.ext_fields or {}
        master = fields.get("masterBrokerId")
        if master and master != "null" and fields.get("masterAddress"):
            members = sync.members if sync is not None else frozenset({int(master)})
            await self.change_role(
                int(master),
                fields["masterAddress"],
                int(fields.get("masterEpoch", "0")),
                int(fields.get("syncStateSetEpoch", "0")),
                members,
            )
        else:
            await self.elect()

    async def elect(self) -> None:
        """Ask the controller to elect a master (``brokerElect``): this broker, if it may be."""
        fields = self._names() | {
            "brokerId": str(self.broker_id),
            "designateElect": "false",
            "invokeTime": str(int(time.time() * 1000)),
        }
        response = await self._invoke(RequestCode.CONTROLLER_ELECT_MASTER, fields)
        if response.code not in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
            logger.warning(
                "broker %s: no master elected: %s %s", self.config.broker_name, response.code, response.remark
            )
            return
        body = ElectMasterResponseBody.decode(response.body) if response.body else None
        await self._follow_answer(response, SyncStateSet(body.sync_state_set, 0) if body else None)

    async def heartbeat(self) -> None:
        if self.broker_id is None:
            return
        fields = self._names() | {
            "brokerAddr": self.config.address,
            "brokerId": str(self.broker_id),
            "epoch": str(self.epochs.last_epoch),
            "maxOffset": str(self.store.commitlog.max_offset),
            "confirmOffset": str(self.ha.acks.confirmed if self.is_master else self.store.commitlog.max_offset),
            "heartbeatTimeoutMills": str(self.config.controller_heart_beat_timeout_mills),
            "electionPriority": "0",
        }
        addresses = self.config.controller_addresses()
        failed: list[SparkmqError] = []
        for address in addresses:  # every node: a new leader knows who is alive
            try:
                await self.client.invoke_oneway(address, RequestCode.BROKER_HEARTBEAT, fields)
            except SparkmqError as exc:
                failed.append(exc)
        if len(failed) == len(addresses):
            raise failed[-1]

    async def sync_metadata(self) -> None:
        """GET_REPLICA_INFO: a missed role change, a group without master, a new SyncStateSet."""
        if not self.registered:
            await self.register()
            return
        response = await self._invoke(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": self.config.broker_name})
        if response.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
            await self.register()
            return
        _check(response, "CONTROLLER_GET_REPLICA_INFO")
        fields = response.ext_fields or {}
        sync = SyncStateSet.decode(response.body)
        epoch = int(fields.get("masterEpoch", "0"))
        master = fields.get("masterBrokerId")
        if not master or master == "null" or not fields.get("masterAddress"):
            await self.elect()
        elif epoch > self.master_epoch:
            await self.change_role(int(master), fields["masterAddress"], epoch, sync.epoch, sync.members)
        elif epoch == self.master_epoch and self.is_master and sync.epoch > self.sync_state_set_epoch:
            self._set_sync_state_set(sync.members, sync.epoch)

    # -- roles --------------------------------------------------------------------------------
    async def change_role(
        self, master_id: int, master_address: str, epoch: int, sync_epoch: int, members: frozenset[int]
    ) -> None:
        """``changeBrokerRole``: only a newer master epoch changes anything."""
        async with self._lock:
            if epoch <= self.master_epoch:
                return
            if master_id == self.broker_id:
                await self._to_master(epoch, sync_epoch, members)
            else:
                await self._to_replica(master_id, master_address, epoch)

    async def _to_master(self, epoch: int, sync_epoch: int, members: frozenset[int]) -> None:
        await self.ha.stop_following()
        store = self.store
        if store.slave_mode:
            store.truncate_replica(store.replica_records_end)  # a torn last record from the link goes
        start = store.commitlog.max_offset
        self.epochs.truncate_after(start)
        self.epochs.append(epoch, start)
        self.master_epoch, self.master_broker_id, self.master_address = epoch, self.broker_id, self.config.address
        self.ha.acks.confirmed = start
        self.ha.acks.serving = True
        self._set_sync_state_set(members, sync_epoch)
        await self.ha.become_master()
        logger.warning(
            "broker %s: now master (brokerId %s, epoch %d, from offset %d)",
            self.config.broker_name,
            self.broker_id,
            epoch,
            start,
        )
        await self.on_role(True, 0, self.config.address)

    async def _to_replica(self, master_id: int, master_address: str, epoch: int) -> None:
        assert self.broker_id is not None
        await self.ha.stop_following()
        self.store.slave_mode = True
        self.ha.acks.stop_serving()
        self.master_epoch, self.master_broker_id, self.master_address = epoch, master_id, master_address
        self.sync_state_set, self.sync_state_set_epoch = frozenset(), 0
        logger.warning(
            "broker %s: now replica %d of master %d at %s (epoch %d)",
            self.config.broker_name,
            self.broker_id,
            master_id,
            master_address,
            epoch,
        )
        await self.on_role(False, self.broker_id, master_address)
        self.ha.become_slave(self.broker_id, self._prepare_link)

    async def _prepare_link(self) -> str:
        """Before each HA link: truncate to the consistent point with the master; its HA address."""
        response = await self.client.invoke(
            self.master_address, RequestCode.GET_BROKER_EPOCH_CACHE, {}, timeout=CONTROLLER_TIMEOUT_S
        )
        _check(response, "GET_BROKER_EPOCH_CACHE")
        theirs = EpochEntryCache.decode(response.body)
        if not theirs.epoch_list or theirs.epoch_list[-1].epoch < self.master_epoch:
            logger.info(
                "broker %s: master %s has not taken epoch %d yet",
                self.config.broker_name,
                self.master_address,
                self.master_epoch,
            )
            return ""
        store = self.store
        ours_max = store.commitlog.max_offset
        point = consistent_point(self.epochs.entries, ours_max, theirs.epoch_list, theirs.max_offset)
        if ours_max > 0 and point is None:
            raise RemoteError(
                f"this CommitLog shares no epoch with master {self.master_address}: refusing to follow it",
                code=ResponseCode.SYSTEM_ERROR,
            )
        if point is not None and point < ours_max:
            logger.warning(
                "broker %s: CommitLog diverged from master %s after offset %d: truncating %d bytes",
                self.config.broker_name,
                self.master_address,
                point,
                ours_max - point,
            )
            await asyncio.to_thread(store.truncate_replica, point)
        self.epochs.replace(theirs.epoch_list)
        return (response.ext_fields or {}).get("haServerAddr", "")

    # -- the SyncStateSet ---------------------------------------------------------------------
    def _set_sync_state_set(self, members: frozenset[int], epoch: int) -> None:
        self.sync_state_set, self.sync_state_set_epoch = members, epoch
        acks = self.ha.acks
        acks.sync_state_set = frozenset(m for m in members if m != self.broker_id)
        acks.settle()

    async def check_sync_state_set(self) -> None:
        """``checkSyncStateSetAndDoReport``: shrink by lag, expand by catch-up, report a change."""
        if not self.is_master:
            return
        async with self._lock:
            if not self.is_master:
                return
            acks = self.ha.acks
            deadline = now_ms() - self.config.ha_max_time_slave_not_catchup
            epoch_start = self.epochs.entries[-1].start_offset if self.epochs.entries else 0
            wanted = {self.broker_id}
            for key, replica in acks.replicas.items():
                if not isinstance(key, int) or replica.caught_up_ms < deadline:
                    continue
                if key in self.sync_state_set or replica.offset >= max(acks.confirmed, epoch_start):
                    wanted.add(key)
            new = frozenset(w for w in wanted if w is not None)
            if new == self.sync_state_set:
                return
            joining = new - self.sync_state_set
            if joining:  # count the joining replicas' acks from now (markSynchronizingSyncStateSet)
                acks.sync_state_set = frozenset(m for m in new | self.sync_state_set if m != self.broker_id)
            fields = {
                "brokerName": self.config.broker_name,
                "masterBrokerId": str(self.broker_id),
                "masterEpoch": str(self.master_epoch),
                "invokeTime": str(int(time.time() * 1000)),
            }
            body = SyncStateSet(new, self.sync_state_set_epoch).encode()
            try:
                response = await self._invoke(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, fields, body)
            finally:
                self._set_sync_state_set(self.sync_state_set, self.sync_state_set_epoch)  # undo the marking
            if response.code != ResponseCode.SUCCESS:
                logger.warning(
                    "broker %s: the controller refused SyncStateSet %s: %s %s",
                    self.config.broker_name,
                    sorted(new),
                    response.code,
                    response.remark,
                )
                return
            result = SyncStateSet.decode(response.body)
            self._set_sync_state_set(result.members, result.epoch)
            logger.info(
                "broker %s: SyncStateSet is now %s (epoch %d)",
                self.config.broker_name,
                sorted(result.members),
                result.epoch,
            )

    # -- requests to this broker --------------------------------------------------------------
    async def role_changed(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        """NOTIFY_BROKER_ROLE_CHANGED from the controller."""
        fields = request.ext_fields or {}
        try:
            sync = SyncStateSet.decode(request.body)
            master, epoch = int(fields["masterBrokerId"]), int(fields["masterEpoch"])
            sync_epoch = int(fields.get("syncStateSetEpoch", str(sync.epoch)))
        except (KeyError, ValueError) as exc:
            return request.make_response(ResponseCode.CONTROLLER_INVALID_REQUEST, remark=f"bad role notice: {exc!r}")
        await self.change_role(master, fields.get("masterAddress", ""), epoch, sync_epoch, sync.members)
        return request.make_response()

    async def epoch_cache(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        """GET_BROKER_EPOCH_CACHE: this broker's epochs (and, for replicas to link to, its HA address)."""
        max_offset = self.store.commitlog.max_offset
        cache = EpochEntryCache(
            self.config.broker_cluster_name,
            self.config.broker_name,
            self.broker_id if self.broker_id is not None else -1,
            tuple(with_ends(self.epochs.entries, max_offset)),
            max_offset,
        )
        return request.make_response(ext_fields={"haServerAddr": self.ha.config.ha_address}, body=cache.encode())


def _check(response: RemotingCommand, what: str) -> None:
    if response.code != ResponseCode.SUCCESS:
        raise RemoteError(f"controller refused {what}: {response.code} {response.remark}", code=response.code)
