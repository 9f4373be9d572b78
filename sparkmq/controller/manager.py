"""ControllerManager: the controller's processors, its broker scan and the role-change notices.

Serves RocketMQ 5's controller RPCs on a :class:`RemotingServer` it is given (the NameServer's
when embedded, ``enableControllerInNamesrv=true``, or its own: :class:`ControllerServer`).
When a master's heartbeats stop or its connection closes, it elects a new master among the
live SyncStateSet members and tells every replica of the group (NOTIFY_BROKER_ROLE_CHANGED).
Its tables live in :mod:`~sparkmq.controller.tables`: one node's controller.json, or a Raft log
among the ``controllerDLegerPeers`` nodes, where only the leader answers and elects (the others
answer CONTROLLER_NOT_LEADER). A change is answered once it is committed, so a restarted or newly
elected controller keeps the epochs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sparkmq.errors import InvalidFieldError, SparkmqError
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.controller_bodies import SyncStateSet, decode_broker_names
from sparkmq.remoting import RemotingClient, RemotingConnection, RemotingServer
from sparkmq.remoting.periodic import run_every, stop_tasks

from .config import ControllerConfig
from .heartbeats import BrokerHeartbeatManager, BrokerLiveInfo, Key
from .replicas import Outcome, ReplicasInfoManager
from .tables import open_tables

logger = logging.getLogger(__name__)
NOTIFY_TIMEOUT_S = 3.0
LEADER_DUTIES_INTERVAL_S = 0.5
Processor = Callable[[RemotingCommand, RemotingConnection], Awaitable[RemotingCommand]]


def _text(request: RemotingCommand, name: str, default: str | None = None) -> str:
    value = (request.ext_fields or {}).get(name)
    if value is None or value == "":
        if default is None:
            raise InvalidFieldError(f"header field {name} is missing", field=name)
        return default
    return value


def _int(request: RemotingCommand, name: str, default: int | None = None) -> int:
    value = (request.ext_fields or {}).get(name)
    if value is None or value == "" or value == "null":
        if default is None:
            raise InvalidFieldError(f"header field {name} is missing", field=name)
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise InvalidFieldError(f"header field {name} is not an integer: {value[:40]!r}", field=name) from exc


class ControllerManager:
    """One controller node's state and request handling; ``start()``/``close()`` run its scan."""

    def __init__(self, config: ControllerConfig, server: RemotingServer, address: str = "") -> None:
        self.config = config
        self.address = address
        self.replicas = ReplicasInfoManager(config.enable_elect_unclean_master)
        self.heartbeats = BrokerHeartbeatManager()
        self.client = RemotingClient()
        self.tables = open_tables(config)
        self._revision = -1  # the tables' revision self.replicas shows
        self._write_lock = asyncio.Lock()
        self._departed: set[Key] = set()  # replicas seen leaving (closed connection, silence)
        self._started_ms = 0
        self._tasks: list[asyncio.Task[Any]] = []
        self._closing = False
        self.elections = 0  # elections that changed the master (tests and the bench read it)
        for code, processor in self._table().items():
            server.register(code, processor)
        server.on_connection_closed(self._connection_closed)

    def _table(self) -> dict[RequestCode, Any]:
        led = {
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: self.next_broker_id,
            RequestCode.CONTROLLER_APPLY_BROKER_ID: self.apply_broker_id,
            RequestCode.CONTROLLER_REGISTER_BROKER: self.register_broker,
            RequestCode.CONTROLLER_ELECT_MASTER: self.elect_master,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self.replica_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self.sync_state_data,
        }
        return {code: self._leader_only(processor) for code, processor in led.items()} | {
            RequestCode.BROKER_HEARTBEAT: self.broker_heartbeat,
            RequestCode.CONTROLLER_GET_METADATA_INFO: self.metadata_info,
        }

    async def start(self) -> None:
        """Open the tables and start the scan of silent brokers."""
        await self.tables.start(self.address)
        self._started_ms = self.heartbeats.clock()
        self._view()
        logger.info("controller: %d broker groups at revision %d", len(self.replicas.groups), self._revision)
        loop = asyncio.get_running_loop()
        scan = run_every(self.config.scan_not_active_broker_interval / 1000, self.scan_not_active_brokers, "controller")
        duties = run_every(LEADER_DUTIES_INTERVAL_S, self.leader_duties, "controller")
        self._tasks += [
            loop.create_task(scan, name="sparkmq-controller-scan"),
            loop.create_task(duties, name="sparkmq-controller-duties"),
        ]

    async def close(self) -> None:
        self._closing = True  # the server's own connections close next: that is no broker leaving
        await stop_tasks(self._tasks, "controller")
        self._tasks.clear()
        await self.client.close()
        await self.tables.close()

    # -- the tables ---------------------------------------------------------------------------
    def _view(self) -> ReplicasInfoManager:
        """``self.replicas`` at the tables' last committed revision."""
        revision, state = self.tables.snapshot()
        if revision != self._revision:
            self.replicas.load_json(state)
            self._revision = revision
        return self.replicas

    async def _write(self, operation: Callable[[ReplicasInfoManager], Outcome]) -> Outcome:
        """Run ``operation`` on a copy of the tables and commit the copy if it changed them."""
        async with self._write_lock:
            if not self.tables.is_leader():
                return self._not_leader()
            view = self._view()
            work = ReplicasInfoManager(view.enable_elect_unclean_master)
            work.load_json(view.to_json())
            outcome = operation(work)
            if outcome.changed and not await self.tables.commit(self._revision, work.to_json()):
                return Outcome.fail(ResponseCode.CONTROLLER_NOT_LEADER, "the change was not committed: retry")
            self._view()
            return outcome

    def _not_leader(self) -> Outcome:
        leader_id, leader_address = self.tables.leader()
        where = f"the leader is {leader_id} at {leader_address}" if leader_address else "no leader is known yet"
        return Outcome.fail(ResponseCode.CONTROLLER_NOT_LEADER, f"this controller is not the leader: {where}")

    def _leader_only(self, processor: Processor) -> Processor:
        async def process(request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
            if not self.tables.is_leader():
                outcome = self._not_leader()
                return request.make_response(outcome.code, remark=outcome.remark)
            return await processor(request, connection)

        return process

    # -- liveness -----------------------------------------------------------------------------
    def alive(self, cluster: str, name: str, broker_id: int) -> bool:
        return self.heartbeats.is_alive(cluster, name, broker_id)

    async def scan_not_active_brokers(self) -> None:
        await self._brokers_left(self.heartbeats.scan(), "stopped heart-beating")

    async def leader_duties(self) -> None:
        """Announce this node; as leader, elect for groups whose master left (also under a previous leader)."""
        await self.tables.announce()
        if not self.tables.is_leader():
            return
        settled = self.heartbeats.clock() - self._started_ms > self.config.default_heartbeat_timeout_ms
        for group in list(self._view().groups.values()):
            if group.master is None or self.alive(group.cluster, group.name, group.master):
                continue
            key = (group.cluster, group.name, group.master)
            if key in self._departed or settled:  # a node that just started has not heard every heartbeat yet
                await self._elect_after_departure(group.name)

    def _connection_closed(self, connection: RemotingConnection) -> None:
        gone = self.heartbeats.channel_closed(connection)
        if gone and not self._closing:
            task = asyncio.get_running_loop().create_task(self._brokers_left(gone, "closed its connection"))
            self._tasks = [t for t in self._tasks if not t.done()] + [task]

    async def _brokers_left(self, gone: list[Key], why: str) -> None:
        for key in gone:
            _cluster, name, broker_id = key
            self._departed.add(key)
            logger.warning("controller: broker %s/%d %s", name, broker_id, why)
            group = self._view().groups.get(name)
            if group is not None and group.master == broker_id and self.tables.is_leader():
                await self._elect_after_departure(name)

    async def _elect_after_departure(self, name: str) -> None:
        def elect(replicas: ReplicasInfoManager) -> Outcome:
            group = replicas.groups.get(name)
            if group is None or group.master is None or self.alive(group.cluster, name, group.master):
                return Outcome.fail(ResponseCode.CONTROLLER_MASTER_STILL_EXIST, "nothing to elect")
            return replicas.elect_master(name, None, False, self.alive, self.heartbeats.live_info)

        outcome = await self._write(elect)
        if outcome.code == ResponseCode.SUCCESS:
            self.elections += 1
            fields = outcome.fields
            logger.warning(
                "controller: elected %s as master of %s (epoch %s)",
                fields["masterBrokerId"],
                name,
                fields["masterEpoch"],
            )
            await self._notify_role_changed(name)
        elif outcome.code != ResponseCode.CONTROLLER_MASTER_STILL_EXIST:
            logger.error("controller: %s", outcome.remark)

    async def _notify_role_changed(self, name: str) -> None:
        group = self._view().groups[name]
        fields = {
            "masterAddress": group.addresses.get(group.master, "") if group.master is not None else "",
            "masterEpoch": str(group.master_epoch),
            "syncStateSetEpoch": str(group.sync_state_set_epoch),
            "masterBrokerId": str(group.master),
        }
        body = SyncStateSet(group.sync_state_set, group.sync_state_set_epoch).encode()
        for broker_id, address in sorted(group.addresses.items()):
            if not self.alive(group.cluster, name, broker_id):
                continue
            try:
                await self.client.invoke_oneway(address, RequestCode.NOTIFY_BROKER_ROLE_CHANGED, fields, body)
            except SparkmqError as exc:
                logger.warning("controller: cannot tell %s of the new master of %s: %s", address, name, exc.remark)

    async def _answer(
        self, request: RemotingCommand, operation: Callable[[ReplicasInfoManager], Outcome]
    ) -> RemotingCommand:
        outcome = await self._write(operation)
        return request.make_response(outcome.code, remark=outcome.remark, ext_fields=outcome.fields, body=outcome.body)

    # -- processors ---------------------------------------------------------------------------
    async def broker_heartbeat(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        cluster = _text(request, "clusterName")
        info = BrokerLiveInfo(
            _text(request, "brokerName"),
            _int(request, "brokerId"),
            _text(request, "brokerAddr"),
            0,
            _int(request, "heartbeatTimeoutMills", self.config.default_heartbeat_timeout_ms),
            _int(request, "epoch", 0),
            _int(request, "maxOffset", 0),
            _int(request, "confirmOffset", 0),
            _int(request, "electionPriority", 0),
            connection,
        )
        self.heartbeats.heartbeat(cluster, info)
        self._departed.discard((cluster, info.broker_name, info.broker_id))
        return request.make_response()

    async def next_broker_id(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        cluster, name = _text(request, "clusterName"), _text(request, "brokerName")
        return await self._answer(request, lambda replicas: replicas.next_broker_id(cluster, name))

    async def apply_broker_id(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        cluster, name = _text(request, "clusterName"), _text(request, "brokerName")
        broker_id, check_code = _int(request, "appliedBrokerId"), _text(request, "registerCheckCode")
        return await self._answer(
            request, lambda replicas: replicas.apply_broker_id(cluster, name, broker_id, check_code)
        )

    async def register_broker(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        cluster, name = _text(request, "clusterName"), _text(request, "brokerName")
        broker_id, address = _int(request, "brokerId"), _text(request, "brokerAddress")
        return await self._answer(
            request, lambda replicas: replicas.register_broker(cluster, name, broker_id, address, self.alive)
        )

    async def elect_master(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        name = _text(request, "brokerName")
        broker_id = _int(request, "brokerId", -1)
        designate = _text(request, "designateElect", "false").lower() == "true"
        outcome = await self._write(
            lambda replicas: replicas.elect_master(
                name, None if broker_id < 0 else broker_id, designate, self.alive, self.heartbeats.live_info
            )
        )
        answer = request.make_response(
            outcome.code, remark=outcome.remark, ext_fields=outcome.fields, body=outcome.body
        )
        if outcome.code == ResponseCode.SUCCESS and outcome.changed:
            self.elections += 1
            await self._notify_role_changed(name)
        return answer

    async def alter_sync_state_set(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        name, master, epoch = (
            _text(request, "brokerName"),
            _int(request, "masterBrokerId"),
            _int(request, "masterEpoch"),
        )
        proposed = SyncStateSet.decode(request.body)
        return await self._answer(
            request, lambda replicas: replicas.alter_sync_state_set(name, master, epoch, proposed, self.alive)
        )

    async def replica_info(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        name = _text(request, "brokerName")
        return await self._answer(request, lambda replicas: replicas.replica_info(name))

    async def metadata_info(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        leader_id, leader_address = self.tables.leader()
        fields = {
            "group": self.config.group,
            "controllerLeaderId": leader_id,
            "controllerLeaderAddress": leader_address,
            "isLeader": str(self.tables.is_leader()).lower(),
            "peers": ";".join(f"{node_id}-{address}" for node_id, address in self.tables.peers()),
        }
        return request.make_response(ext_fields=fields)

    async def sync_state_data(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        names = decode_broker_names(request.body)
        return request.make_response(body=self._view().sync_state_data(names, self.alive).encode())
