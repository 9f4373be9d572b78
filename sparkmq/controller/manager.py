"""ControllerManager: the controller's processors, its broker scan and the role-change notices.

Serves RocketMQ 5's controller RPCs on a :class:`RemotingServer` it is given (the NameServer's
when embedded, ``enableControllerInNamesrv=true``, or its own: :class:`ControllerServer`).
When a master's heartbeats stop or its connection closes, it elects a new master among the
live SyncStateSet members and tells every replica of the group (NOTIFY_BROKER_ROLE_CHANGED).
Its tables are persisted (``controllerStorePath``/controller.json) after every change, so a
restarted controller keeps the epochs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from sparkmq.config_file import ConfigFile
from sparkmq.errors import ConfigError, InvalidFieldError, SparkmqError
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.controller_bodies import SyncStateSet, decode_broker_names
from sparkmq.remoting import RemotingClient, RemotingConnection, RemotingServer
from sparkmq.remoting.periodic import run_every, stop_tasks

from .config import ControllerConfig
from .heartbeats import BrokerHeartbeatManager, BrokerLiveInfo, Key
from .replicas import Outcome, ReplicasInfoManager

logger = logging.getLogger(__name__)
NOTIFY_TIMEOUT_S = 3.0


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
        self._file: ConfigFile[dict[str, Any]] = ConfigFile(
            config.store_path / "controller.json", json.loads, json.dumps, ConfigError
        )
        self._tasks: list[asyncio.Task[Any]] = []
        self._closing = False
        self.elections = 0  # elections that changed the master (tests and the bench read it)
        for code, processor in self._table().items():
            server.register(code, processor)
        server.on_connection_closed(self._connection_closed)

    def _table(self) -> dict[RequestCode, Any]:
        return {
            RequestCode.BROKER_HEARTBEAT: self.broker_heartbeat,
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: self.next_broker_id,
            RequestCode.CONTROLLER_APPLY_BROKER_ID: self.apply_broker_id,
            RequestCode.CONTROLLER_REGISTER_BROKER: self.register_broker,
            RequestCode.CONTROLLER_ELECT_MASTER: self.elect_master,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self.replica_info,
            RequestCode.CONTROLLER_GET_METADATA_INFO: self.metadata_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self.sync_state_data,
        }

    async def start(self) -> None:
        """Load the persisted tables and start the scan of silent brokers."""
        state = await asyncio.to_thread(self._file.load)
        if state is not None:
            self.replicas.load_json(state)
            logger.info("controller: loaded %d broker groups from %s", len(self.replicas.groups), self._file.path)
        scan = run_every(self.config.scan_not_active_broker_interval / 1000, self.scan_not_active_brokers, "controller")
        self._tasks.append(asyncio.get_running_loop().create_task(scan, name="sparkmq-controller-scan"))

    async def close(self) -> None:
        self._closing = True  # the server's own connections close next: that is no broker leaving
        await stop_tasks(self._tasks, "controller")
        self._tasks.clear()
        await self.client.close()

    # -- liveness -----------------------------------------------------------------------------
    def alive(self, cluster: str, name: str, broker_id: int) -> bool:
        return self.heartbeats.is_alive(cluster, name, broker_id)

    async def scan_not_active_brokers(self) -> None:
        await self._brokers_left(self.heartbeats.scan(), "stopped heart-beating")

    def _connection_closed(self, connection: RemotingConnection) -> None:
        gone = self.heartbeats.channel_closed(connection)
        if gone and not self._closing:
            task = asyncio.get_running_loop().create_task(self._brokers_left(gone, "closed its connection"))
            self._tasks = [t for t in self._tasks if not t.done()] + [task]

    async def _brokers_left(self, gone: list[Key], why: str) -> None:
        for _cluster, name, broker_id in gone:
            group = self.replicas.groups.get(name)
            logger.warning("controller: broker %s/%d %s", name, broker_id, why)
            if group is None or group.master != broker_id:
                continue
            outcome = self.replicas.elect_master(name, None, False, self.alive, self.heartbeats.live_info)
            await self._persist_if_changed(outcome)
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
            else:
                logger.error("controller: %s", outcome.remark)

    async def _notify_role_changed(self, name: str) -> None:
        group = self.replicas.groups[name]
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

    async def _persist_if_changed(self, outcome: Outcome) -> None:
        if outcome.changed:
            await asyncio.to_thread(self._file.persist, self.replicas.to_json())

    async def _answer(self, request: RemotingCommand, outcome: Outcome) -> RemotingCommand:
        await self._persist_if_changed(outcome)
        return request.make_response(outcome.code, remark=outcome.remark, ext_fields=outcome.fields, body=outcome.body)

    # -- processors ---------------------------------------------------------------------------
    async def broker_heartbeat(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
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
        self.heartbeats.heartbeat(_text(request, "clusterName"), info)
        return request.make_response()

    async def next_broker_id(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        outcome = self.replicas.next_broker_id(_text(request, "clusterName"), _text(request, "brokerName"))
        return await self._answer(request, outcome)

    async def apply_broker_id(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        outcome = self.replicas.apply_broker_id(
            _text(request, "clusterName"),
            _text(request, "brokerName"),
            _int(request, "appliedBrokerId"),
            _text(request, "registerCheckCode"),
        )
        return await self._answer(request, outcome)

    async def register_broker(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        outcome = self.replicas.register_broker(
            _text(request, "clusterName"),
            _text(request, "brokerName"),
            _int(request, "brokerId"),
            _text(request, "brokerAddress"),
            self.alive,
        )
        return await self._answer(request, outcome)

    async def elect_master(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        name = _text(request, "brokerName")
        broker_id = _int(request, "brokerId", -1)
        designate = _text(request, "designateElect", "false").lower() == "true"
        outcome = self.replicas.elect_master(
            name, None if broker_id < 0 else broker_id, designate, self.alive, self.heartbeats.live_info
        )
        answer = await self._answer(request, outcome)
        if outcome.code == ResponseCode.SUCCESS and outcome.changed:
            self.elections += 1
            await self._notify_role_changed(name)
        return answer

    async def alter_sync_state_set(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        outcome = self.replicas.alter_sync_state_set(
            _text(request, "brokerName"),
            _int(request, "masterBrokerId"),
            _int(request, "masterEpoch"),
            SyncStateSet.decode(request.body),
            self.alive,
        )
        return await self._answer(request, outcome)

    async def replica_info(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        return await self._answer(request, self.replicas.replica_info(_text(request, "brokerName")))

    async def metadata_info(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        node = "n0"
        fields = {
            "group": self.config.group,
            "controllerLeaderId": node,
            "controllerLeaderAddress": self.address,
            "isLeader": "true",
            "peers": f"{node}-{self.address}",
        }
        return request.make_response(ext_fields=fields)

    async def sync_state_data(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        names = decode_broker_names(request.body)
        return request.make_response(body=self.replicas.sync_state_data(names, self.alive).encode())
