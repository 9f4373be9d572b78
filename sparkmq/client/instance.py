"""ClientInstance: what one producer or consumer needs from the cluster, asyncio-native.

It resolves topic routes through the NameServers (cached, refreshed every 30 s and after
errors), keeps one connection per broker, heartbeats every broker in its routes every
30 s, serves broker → client requests (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE) and unregisters
cleanly on close.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from sparkmq.client.responses import check_response
from sparkmq.client.routes import TopicRoute
from sparkmq.client.security import ClientSecurity
from sparkmq.errors import ConfigError, RemoteError, SparkmqError, TopicNotExistError
from sparkmq.message.names import MASTER_ID
from sparkmq.message.properties import PRODUCER_GROUP, find_property
from sparkmq.message.record import StoredMessage, decode_record
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.bodies import MessageQueue, TopicRouteData
from sparkmq.protocol.client_headers import (
    CheckTransactionStateRequestHeader,
    ConsumerGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    ResetOffsetRequestHeader,
    UnregisterClientRequestHeader,
)
from sparkmq.protocol.group_bodies import ConsumerListBody
from sparkmq.protocol.heartbeat import ConsumerData, HeartbeatData, ProducerData
from sparkmq.protocol.offset_headers import GetRouteInfoRequestHeader
from sparkmq.remoting import RemotingClient, RemotingConnection
from sparkmq.remoting.periodic import run_every, run_once, stop_tasks

if TYPE_CHECKING:  # ~25 ms of import that Spark's per-query source runner would pay for nothing
    from sparkmq.protocol.running_info import ConsumerRunningInfo

logger = logging.getLogger(__name__)
_RANDOM = random.Random()  # our own: library code must not move the global random state (tests seed it)
ROUTE_REFRESH_S = 30.0
HEARTBEAT_S = 30.0
NAMESRV_TIMEOUT_S = 5.0
# Answers a broker's CHECK_TRANSACTION_STATE (by sending END_TRANSACTION back on ``connection``).
TransactionChecker = Callable[
    [CheckTransactionStateRequestHeader, StoredMessage, RemotingConnection], Coroutine[Any, Any, None]
]


class ClientInstance:
    """Routes, connections and heartbeats for the groups of one client object."""

    def __init__(
        self,
        namesrv_addr: str,
        instance_name: str | None = None,
        client_ip: str = "127.0.0.1",
        security: ClientSecurity | None = None,
    ) -> None:
        self.namesrv_addresses = [a.strip() for a in namesrv_addr.split(";") if a.strip()]
        if not self.namesrv_addresses:
            raise ConfigError("namesrv_addr names no NameServer (expected host:port[;host:port])")
        self.client_id = f"{client_ip}@{instance_name or os.getpid()}#{_RANDOM.getrandbits(32):08x}"
        self.security = security or ClientSecurity()
        self.remoting = RemotingClient(
            handler=self._serve, signer=self.security.signer(), ssl=self.security.ssl_context()
        )
        self.routes: dict[str, TopicRoute] = {}
        self.producer_groups: set[str] = set()
        self.consumer_data: dict[str, Callable[[], ConsumerData]] = {}
        self.rebalance_hooks: dict[str, Callable[[], Awaitable[None]]] = {}
        # group -> what its push consumer does on RESET_CONSUMER_CLIENT_OFFSET (topic, new offsets)
        self.reset_hooks: dict[str, Callable[[str, dict[MessageQueue, int]], Awaitable[None]]] = {}
        # group -> its consumer's answer to GET_CONSUMER_RUNNING_INFO
        self.running_info_hooks: dict[str, Callable[[], ConsumerRunningInfo]] = {}
        self.transaction_checkers: dict[str, TransactionChecker] = {}  # by producer group
        self._tasks: list[asyncio.Task[None]] = []
        self._hook_tasks: set[asyncio.Task[Any]] = set()
        self.suggested_broker: dict[MessageQueue, int] = {}  # pullFromWhichNodeTable: a pull's suggestWhichBrokerId
        self._heartbeat_failures: dict[str, int] = {}  # by broker address: failed rounds in a row
        self._unreachable: set[str] = set()  # broker names whose first read address failed: route looked up again

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(run_every(ROUTE_REFRESH_S, self.refresh_routes, f"client {self.client_id}")),
            loop.create_task(run_every(HEARTBEAT_S, self.heartbeat, f"client {self.client_id}")),
        ]

    async def close(self) -> None:
        await stop_tasks([*self._tasks, *self._hook_tasks], f"client {self.client_id}")
        await self._unregister()
        await self.remoting.close()

    # -- routes ------------------------------------------------------------------------------
    async def route(self, topic: str, refresh: bool = False) -> TopicRoute:
        """The topic's route; TopicNotExistError when no NameServer knows it."""
        cached = self.routes.get(topic)
        if cached is not None and not refresh:
            return cached
        header = GetRouteInfoRequestHeader(topic).to_fields()
        last_error: SparkmqError | None = None
        for address in _RANDOM.sample(self.namesrv_addresses, len(self.namesrv_addresses)):
            try:
                response = await self.remoting.invoke(
                    address, RequestCode.GET_ROUTEINFO_BY_TOPIC, header, timeout=NAMESRV_TIMEOUT_S
                )
                check_response(response, f"route of topic {topic}")
            except TopicNotExistError:
                self.routes.pop(topic, None)
                raise
            except SparkmqError as exc:
                last_error = exc
                continue
            route = TopicRoute(topic, TopicRouteData.decode(response.body))
            self.routes[topic] = route
            return route
        assert last_error is not None
        raise last_error

    async def publish_route(self, topic: str, default_topic: str, default_queue_nums: int) -> TopicRoute:
        """The route to send to: the topic's own, or for a topic not created yet the brokers of
        ``default_topic`` (TBW102) with at most ``default_queue_nums`` queues each, so that the
        broker auto-creates it (``getDefaultTopicRouteInfoFromNameServer``). The template is asked
        anew each time: a cached one may name a master that died since."""
        try:
            return await self.route(topic)
        except TopicNotExistError as missing:
            try:
                template = await self.route(default_topic, refresh=True)
            except TopicNotExistError as exc:
                raise TopicNotExistError(
                    f"no broker serves topic {topic} (and none offers {default_topic} to create it): {missing.remark}"
                ) from exc
        queues = tuple(
            dataclasses.replace(
                q,
                read_queue_nums=min(q.read_queue_nums, default_queue_nums),
                write_queue_nums=min(q.write_queue_nums, default_queue_nums),
            )
            for q in template.data.queue_datas
        )
        route = TopicRoute(topic, dataclasses.replace(template.data, queue_datas=queues))
        self.routes[topic] = route
        return route

    async def refresh_routes(self) -> None:
        for topic in list(self.routes):
            try:
                await self.route(topic, refresh=True)
            except TopicNotExistError:
                logger.warning("topic %s disappeared from the NameServers", topic)

    def broker_address(self, broker_name: str) -> str:
        for route in self.routes.values():
            address = route.master_address(broker_name)
            if address:
                return address
        raise RemoteError(f"no known master address for broker {broker_name}", retriable=True)

    def broker_addresses(self) -> list[str]:
        return sorted({a for r in self.routes.values() for a in r.broker_addresses()})

    # -- heartbeats ------------------------------------------------------------------------
    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            self.client_id,
            tuple(ProducerData(g) for g in sorted(self.producer_groups)),
            tuple(build() for build in self.consumer_data.values()),
        )

    async def heartbeat(self) -> None:
        """Send a heartbeat to every broker in the known routes.

        A broker that fails a heartbeat is logged once per streak (WARNING), the rounds after at
        DEBUG, and at INFO when it answers again: a broker that is down is one line, not one a round.
        """
        body = self.heartbeat_data().encode()
        failures = self._heartbeat_failures
        for address in self.broker_addresses():
            try:
                check_response(await self.remoting.invoke(address, RequestCode.HEART_BEAT, body=body), "heartbeat")
            except SparkmqError as exc:
                failures[address] = failures.get(address, 0) + 1
                level = logging.WARNING if failures[address] == 1 else logging.DEBUG
                logger.log(level, "heartbeat to %s failed: %s", address, exc.remark)
            else:
                if address in failures:
                    logger.info("heartbeat to %s succeeded after %d failed rounds", address, failures.pop(address))

    async def _unregister(self) -> None:
        for address in self.broker_addresses():
            for group in self.producer_groups:
                await self._unregister_one(address, UnregisterClientRequestHeader(self.client_id, group, None))
            for group in self.consumer_data:
                await self._unregister_one(address, UnregisterClientRequestHeader(self.client_id, None, group))

    async def _unregister_one(self, address: str, header: UnregisterClientRequestHeader) -> None:
        try:
            await self.remoting.invoke(address, RequestCode.UNREGISTER_CLIENT, header.to_fields(), timeout=2.0)
        except SparkmqError as exc:
            logger.warning("unregister from %s failed: %s", address, exc.remark)

    # -- broker -> client ------------------------------------------------------------------
    async def _serve(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand | None:
        if request.code == RequestCode.CHECK_TRANSACTION_STATE:
            self._check_transaction(request, connection)
            return None
        if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            group = NotifyConsumerIdsChangedRequestHeader.from_fields(request.ext_fields).consumer_group
            hook = self.rebalance_hooks.get(group)
            if hook is not None:
                # Keep a reference (the loop holds tasks weakly) and log a failure instead of losing it.
                task = asyncio.get_running_loop().create_task(
                    run_once(hook, f"client {self.client_id}: rebalance of {group} after NOTIFY_CONSUMER_IDS_CHANGED")
                )
                self._hook_tasks.add(task)
                task.add_done_callback(self._hook_tasks.discard)
            return None
        if request.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            group = GetConsumerRunningInfoRequestHeader.from_fields(request.ext_fields).consumer_group
            report = self.running_info_hooks.get(group)
            if report is None:
                return request.make_response(
                    ResponseCode.SYSTEM_ERROR, remark=f"The Consumer Group <{group}> not exist in this consumer"
                )
            return request.make_response(body=report().encode())
        if request.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            self._reset_offsets(request)
            return None
        return request.make_response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f"request type {request.code} not supported by this client"
        )

    def _reset_offsets(self, request: RemotingCommand) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (an admin's resetOffsetByTime): the group's consumer here
        moves its queues of the topic to the broker's new offsets (oneway: nothing to answer)."""
        from sparkmq.protocol.admin_bodies import ResetOffsetBody  # lazily: admin codecs, rarely needed

        try:
            header = ResetOffsetRequestHeader.from_fields(request.ext_fields)
            table = ResetOffsetBody.decode(request.body).offset_table
        except SparkmqError as exc:
            logger.warning("client %s: bad RESET_CONSUMER_CLIENT_OFFSET: %s", self.client_id, exc.remark)
            return
        hook = self.reset_hooks.get(header.group)
        if hook is None:
            logger.info(
                "client %s: offsets of %s reset, but no push consumer of it runs here", self.client_id, header.group
            )
            return
        task = asyncio.get_running_loop().create_task(
            run_once(lambda: hook(header.topic, table), f"client {self.client_id}: offset reset of {header.group}")
        )
        self._hook_tasks.add(task)
        task.add_done_callback(self._hook_tasks.discard)

    async def consumer_ids(self, group: str, broker_name: str) -> list[str]:
        """The client ids of ``group``'s members, as the broker knows them from their heartbeats."""
        fields = ConsumerGroupRequestHeader(group).to_fields()
        response = await self.invoke_read_broker(broker_name, RequestCode.GET_CONSUMER_LIST_BY_GROUP, fields)
        return list(ConsumerListBody.decode(check_response(response, f"members of {group}").body).consumer_id_list)

    async def invoke_broker(
        self, broker_name: str, code: int, ext_fields: dict[str, str], body: bytes = b"", timeout: float = 3.0
    ) -> RemotingCommand:
        return await self.remoting.invoke(self.broker_address(broker_name), code, ext_fields, body, timeout)

    def read_addresses(self, broker_name: str, preferred_id: int = MASTER_ID) -> list[str]:
        """The brokers of ``broker_name`` that can serve reads, best first (``TopicRoute.read_addresses``)."""
        for route in self.routes.values():
            addresses = route.read_addresses(broker_name, preferred_id)
            if addresses:
                return addresses
        return []

    async def invoke_read_broker(
        self,
        broker_name: str,
        code: int,
        ext_fields: dict[str, str],
        body: bytes = b"",
        timeout: float = 3.0,
        preferred_id: int = MASTER_ID,
    ) -> RemotingCommand:
        """A read or offset request to ``broker_name``: to ``preferred_id``, else the master, falling
        back to its slaves while those cannot be reached (a slave serves reads and takes offsets)."""
        addresses = self.read_addresses(broker_name, preferred_id)
        if not addresses:
            raise RemoteError(f"no known address for broker {broker_name}", retriable=True)
        for address in addresses[:-1]:
            try:
                return await self.remoting.invoke(address, code, ext_fields, body, timeout)
            except RemoteError as exc:  # unreachable (or gone mid-request): the next broker of the name
                self._unreachable.add(broker_name)  # its master may have moved (a controller's failover)
                logger.info(
                    "broker %s at %s failed (%s); trying the next of %s", broker_name, address, exc.remark, addresses
                )
        return await self.remoting.invoke(addresses[-1], code, ext_fields, body, timeout)

    async def invoke_queue_broker(
        self, queue: MessageQueue, code: int, ext_fields: dict[str, str], body: bytes = b"", timeout: float = 3.0
    ) -> RemotingCommand:
        """``invoke_read_broker`` for ``queue``, preferring the broker its last pull suggested; the
        topic's route is looked up first when no cached route names that broker."""
        if not self.read_addresses(queue.broker_name):
            await self.route(queue.topic, refresh=True)
        elif queue.broker_name in self._unreachable:
            self._unreachable.discard(queue.broker_name)
            try:
                await self.route(queue.topic, refresh=True)
            except SparkmqError as exc:  # the cached route still serves, through the addresses that answer
                logger.info("route of %s not refreshed: %s", queue.topic, exc.remark)
        preferred = self.suggested_broker.get(queue, MASTER_ID)
        return await self.invoke_read_broker(queue.broker_name, code, ext_fields, body, timeout, preferred)

    def _check_transaction(self, request: RemotingCommand, connection: RemotingConnection) -> None:
        """``ClientRemotingProcessor.checkTransactionState``: hand the check to the message's producer group."""
        try:
            header = CheckTransactionStateRequestHeader.from_fields(request.ext_fields)
            message = decode_record(request.body)
        except SparkmqError as exc:
            logger.warning(
                "client %s: bad CHECK_TRANSACTION_STATE from %s:%d: %s", self.client_id, *connection.peer, exc.remark
            )
            return
        group = (find_property(message.properties_raw, PRODUCER_GROUP.encode()) or b"").decode()
        checker = self.transaction_checkers.get(group)
        if checker is None:
            logger.warning(
                "client %s: CHECK_TRANSACTION_STATE for group %r, which no transaction producer here serves",
                self.client_id,
                group,
            )
            return
        task = asyncio.get_running_loop().create_task(checker(header, message, connection))
        self._hook_tasks.add(task)
        task.add_done_callback(self._hook_tasks.discard)
