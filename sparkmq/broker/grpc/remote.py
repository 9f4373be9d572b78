"""RemoteBackend: the broker groups a NameServer knows, over remoting (proxyMode=CLUSTER, ``sparkmq proxy``).

Routes come from the NameServer (GET_ROUTEINFO_BY_TOPIC, cached a few seconds) and group settings
from a broker (GET_ALL_SUBSCRIPTIONGROUP_CONFIG); a send goes to the master of the queue's broker
group (SEND_MESSAGE_V2), a receive to the broker the client's queue names (POP_MESSAGE), an ack or
a changed invisible time to the broker its receipt handle names (ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME). A broker that cannot be reached is skipped by non-FIFO sends for a
few seconds; the others keep serving.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Collection

from rocketmq.grpc_protocol import definition_pb2 as pb

from sparkmq.broker.grpc.backend import PopAsk, SendOutcome, TopicRoute
from sparkmq.broker.grpc.telemetry import TelemetryChannel
from sparkmq.broker.pop import Popped, ReceiptHandle
from sparkmq.broker.subscriptions import SubscriptionGroupConfig, decode_table
from sparkmq.errors import InvalidReceiptHandleError, RemoteError, SubscriptionParseError
from sparkmq.message.layout import DEFAULT_MAX_MESSAGE_BYTES
from sparkmq.message.names import retry_topic
from sparkmq.message.record import MessageBatch, iter_records
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.bodies import TopicRouteData
from sparkmq.protocol.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeaderV2
from sparkmq.protocol.pop_headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from sparkmq.remoting import RemotingClient
from sparkmq.store.config import DEFAULT_MESSAGE_DELAY_LEVEL, delay_level_millis

logger = logging.getLogger(__name__)
ROUTE_TTL_S = 5.0
GROUPS_TTL_S = 5.0
GROUP_MISS_REFETCH_S = 1.0  # a group the last table lacked is looked up again after this
DOWN_FOR_S = 10.0  # a broker that failed a request is left out of non-FIFO sends this long
REQUEST_TIMEOUT_S = 5.0
MAX_POLL_MS = 20_000  # the broker parks a POP_MESSAGE at most this long
PROXY_PRODUCER_GROUP = "PROXY_GRPC_PRODUCER"
PHYSICAL_OFFSETS_KEPT = 100_000  # handles of served messages whose CommitLog offset a DLQ forward can find
PERSISTENCE = {
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
}


class RemoteBackend:
    """The brokers of the NameServers ``namesrv`` (``host:port[;host:port...]``)."""

    transactions = False

    def __init__(self, namesrv: str, default_invisible_ms: int = 60_000) -> None:
        self.namesrv = [address for address in namesrv.split(";") if address]
        self.max_message_size = DEFAULT_MAX_MESSAGE_BYTES
        self.level_millis = delay_level_millis(DEFAULT_MESSAGE_DELAY_LEVEL)
        self.default_invisible_ms = default_invisible_ms
        self.client = RemotingClient()
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        self._masters: dict[str, str] = {}  # broker name -> master address
        self._down_until: dict[str, float] = {}
        self._groups: tuple[float, dict[str, SubscriptionGroupConfig]] = (0.0, {})
        self._physical: OrderedDict[str, tuple[int, str]] = OrderedDict()  # handle -> CommitLog offset, msg id
        self._earlier: dict[str, int] = {}  # handle -> deliveries before, of a FIFO message being answered

    async def close(self) -> None:
        await self.client.close()

    async def _call(
        self, address: str, code: int, fields: dict[str, str], body: bytes = b"", timeout: float = 0
    ) -> RemotingCommand:
        try:
            return await self.client.invoke(address, code, fields, body, timeout or REQUEST_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise RemoteError(f"broker {address} did not answer: {exc or type(exc).__name__}", retriable=True) from exc

    async def _to_broker(
        self, broker: str, code: int, fields: dict[str, str], body: bytes = b"", timeout: float = 0
    ) -> RemotingCommand:
        address = self._masters.get(broker)
        if address is None:
            raise RemoteError(f"broker group {broker!r} has no master the NameServer knows", retriable=True)
        try:
            return await self._call(address, code, fields, body, timeout)
        except RemoteError:
            self._down_until[broker] = time.monotonic() + DOWN_FOR_S
            raise

    # -- routes and groups -----------------------------------------------------------------
    async def topic(self, name: str, *, create: bool = False) -> TopicRoute | None:
        cached = self._routes.get(name)
        if cached is not None and time.monotonic() - cached[0] < ROUTE_TTL_S:
            return cached[1]
        for address in self.namesrv:
            try:
                response = await self._call(address, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": name})
            except RemoteError as exc:
                logger.warning("proxy: NameServer %s: %s", address, exc.remark)
                continue
            if response.code == ResponseCode.TOPIC_NOT_EXIST:
                self._routes.pop(name, None)
                return None
            if response.code != ResponseCode.SUCCESS:
                continue
            data = TopicRouteData.decode(response.body)
            for broker in data.broker_datas:
                if broker.master_addr:
                    self._masters[broker.broker_name] = broker.master_addr
            queues = sorted(
                (q.broker_name, q.read_queue_nums, q.write_queue_nums)
                for q in data.queue_datas
                if q.broker_name in self._masters
            )
            route = TopicRoute(name, "", tuple(queues))
            self._routes[name] = (time.monotonic(), route)
            return route
        return cached[1] if cached is not None else None  # no NameServer answered: the last route known

    async def group(self, name: str) -> SubscriptionGroupConfig | None:
        fetched, table = self._groups
        age = time.monotonic() - fetched
        if age >= GROUPS_TTL_S or (name not in table and age >= GROUP_MISS_REFETCH_S):
            table = await self._fetch_groups() or table
        return table.get(name) or SubscriptionGroupConfig(name)  # the brokers create a group on first use

    async def _fetch_groups(self) -> dict[str, SubscriptionGroupConfig] | None:
        for broker in sorted(self._masters):
            if not self.available(broker):
                continue
            try:
                response = await self._to_broker(broker, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
                if response.code == ResponseCode.SUCCESS:
                    table = decode_table(response.body)
                    self._groups = (time.monotonic(), table)
                    return table
            except (RemoteError, ValueError, AttributeError) as exc:
                logger.warning("proxy: group settings of broker %s: %s", broker, exc)
        return None

    def group_refusal(self, name: str) -> str:
        return f"consumer group {name!r} is not served"

    def available(self, broker: str) -> bool:
        return self._down_until.get(broker, 0.0) <= time.monotonic()

    # -- send ------------------------------------------------------------------------------
    async def send(self, items: list[tuple[str, MessageBatch, bool]]) -> list[SendOutcome]:
        return [await self._send(broker, batch) for broker, batch, _ in items]  # in order: a message group's

    async def _send(self, broker: str, batch: MessageBatch) -> SendOutcome:
        header = SendMessageRequestHeaderV2(
            PROXY_PRODUCER_GROUP,
            batch.topic,
            "TBW102",
            4,
            batch.queue_id,
            batch.sys_flag,
            batch.born_timestamp,
            batch.flags[0] if batch.flags else 0,
            bytes(batch.properties[0]).decode(),
            0,
            bname=broker,
        )
        try:
            response = await self._to_broker(broker, RequestCode.SEND_MESSAGE_V2, header.to_fields(), batch.bodies[0])
        except RemoteError as exc:
            return SendOutcome(pb.PROXY_TIMEOUT, exc.remark)
        if response.code == ResponseCode.SUCCESS:
            return SendOutcome(pb.OK, "OK", int(response.ext_fields.get("queueOffset", "0") or 0))
        code = PERSISTENCE.get(response.code, pb.INTERNAL_SERVER_ERROR)  # type: ignore[call-overload]
        return SendOutcome(code, f"broker {broker}: {response.remark or response.code}")

    # -- consume ---------------------------------------------------------------------------
    async def pop(self, ask: PopAsk) -> list[Popped]:
        """POP_MESSAGE at ``broker`` (the client's queue names it). A non-FIFO group whose broker is down (or
        unnamed) is served by the topic's other brokers in turn, the last one long polling."""
        route = await self.topic(ask.topic)
        names = [b for b, _, _ in route.brokers] if route is not None else []
        broker, fifo = ask.broker, ask.fifo
        others = [] if fifo else [b for b in names if b != broker and self.available(b)]
        order = [broker] if broker in names and (fifo or self.available(broker)) else others
        failed: RemoteError | None = None
        i = 0
        while i < len(order):
            name = order[i]
            poll_ms = min(ask.wait_ms, MAX_POLL_MS) if i == len(order) - 1 else 0
            header = PopMessageRequestHeader(
                ask.group,
                ask.topic,
                -1 if ask.queue_id is None else ask.queue_id,
                ask.max_nums,
                ask.invisible_ms,
                poll_ms,
                int(time.time() * 1000),
                1,  # initMode MAX, as Apache's proxy asks
                "SQL92" if ask.sql else "TAG",
                ask.sql or ("||".join(sorted(ask.tags)) if ask.tags else "*"),
                fifo,
                ask.attempt_id or None,
            )
            i += 1
            try:
                response = await self._to_broker(
                    name, RequestCode.POP_MESSAGE, header.to_fields(), timeout=poll_ms / 1000 + REQUEST_TIMEOUT_S
                )
            except RemoteError as exc:
                failed = exc
                if name == broker:
                    order += others
                continue
            if response.code == ResponseCode.SUCCESS:
                return self._popped(name, ask.topic, response)
            if response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED:
                raise SubscriptionParseError(f"broker {name}: {response.remark}")
            if response.code != ResponseCode.PULL_NOT_FOUND:
                raise RemoteError(f"broker {name}: POP_MESSAGE answered {response.code} {response.remark}")
            failed = None
        if failed is not None:
            raise failed
        return []

    def _popped(self, broker: str, topic: str, response: RemotingCommand) -> list[Popped]:
        answer = PopMessageResponseHeader.from_fields(response.ext_fields)
        counts = order_counts(answer.order_count_info or "")
        popped, body, pos = [], response.body, 0
        for message in iter_records(body):
            raw = bytes(body[pos : pos + message.total_size])
            pos += message.total_size
            retry = message.topic != topic
            handle = ReceiptHandle(
                message.queue_offset,
                answer.pop_time,
                answer.invisible_time,
                broker,
                message.queue_id,
                message.queue_offset,
                retry,
            )
            self._remember(handle.encode(), message.physical_offset, message.offset_msg_id)
            earlier = counts.get(f"{int(retry)} qo{message.queue_id}%{message.queue_offset}")
            if earlier is not None:
                self._earlier[handle.encode()] = earlier
            popped.append(Popped(message, handle, topic, raw))
        return popped

    def _remember(self, handle: str, physical_offset: int, msg_id: str) -> None:
        self._physical[handle] = (physical_offset, msg_id)
        while len(self._physical) > PHYSICAL_OFFSETS_KEPT:
            self._physical.popitem(last=False)

    def delivery_attempt(self, group: str, popped: Popped, fifo: bool) -> int:
        """A FIFO message's from the broker's ``orderCountInfo``, others' from their reconsume times."""
        earlier = self._earlier.pop(popped.handle.encode(), None)
        return popped.delivery_attempt if earlier is None else earlier + 1

    async def ack(self, group: str, topic: str, handle: str) -> None:
        h = ReceiptHandle.decode(handle)
        header = AckMessageRequestHeader(group, topic, h.queue_id, handle, h.offset)
        response = await self._by_handle(h, RequestCode.ACK_MESSAGE, header.to_fields())
        self._physical.pop(handle, None)
        _check(response, h)

    async def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> ReceiptHandle:
        h = ReceiptHandle.decode(handle)
        header = ChangeInvisibleTimeRequestHeader(group, topic, h.queue_id, handle, h.offset, invisible_ms)
        response = await self._by_handle(h, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header.to_fields())
        _check(response, h)
        answer = ChangeInvisibleTimeResponseHeader.from_fields(response.ext_fields)
        renewed = ReceiptHandle(
            h.ck_id, answer.pop_time, answer.invisible_time, h.broker_name, h.queue_id, h.offset, h.retry
        )
        kept = self._physical.pop(handle, None)
        if kept is not None:
            self._remember(renewed.encode(), *kept)
        return renewed

    async def durable(self) -> None:
        """Nothing to wait for: each broker answered ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME once durable."""

    async def dead_letter(self, group: str, topic: str, handle: str) -> bool:
        """CONSUMER_SEND_MSG_BACK with delay level -1 (straight to ``%DLQ%group``), then the ack."""
        h = ReceiptHandle.decode(handle)
        kept = self._physical.get(handle)
        if kept is None:
            raise InvalidReceiptHandleError(f"receipt handle {handle!r} names no message this proxy delivered")
        physical_offset, msg_id = kept
        origin = retry_topic(group) if h.retry else topic
        header = ConsumerSendMsgBackRequestHeader(physical_offset, group, -1, msg_id, origin)
        response = await self._by_handle(h, RequestCode.CONSUMER_SEND_MSG_BACK, header.to_fields())
        if response.code != ResponseCode.SUCCESS:
            logger.warning("proxy: DLQ copy at broker %s refused: %s", h.broker_name, response.remark)
            return False
        try:
            await self.ack(group, topic, handle)
        except InvalidReceiptHandleError:
            logger.info("a message forwarded to the DLQ of %s expired meanwhile", group)
        return True

    async def _by_handle(self, handle: ReceiptHandle, code: int, fields: dict[str, str]) -> RemotingCommand:
        if handle.broker_name not in self._masters:
            raise InvalidReceiptHandleError(
                f"receipt handle names broker {handle.broker_name!r}, not one of the cluster"
            )
        return await self._to_broker(handle.broker_name, code, fields)

    def producer_joined(self, channel: TelemetryChannel, groups: Collection[str]) -> None:
        """Transactions are not served through the proxy: no check-back target to register."""

    def client_left(self, channel: TelemetryChannel, groups: Collection[str]) -> None:
        """Nothing is registered for a client."""


def order_counts(info: str) -> dict[str, int]:
    """``orderCountInfo``'s entries by key (``"topicType qo<queueId>%<offset>"``); malformed ones are skipped."""
    counts = {}
    for entry in info.split(";"):
        kind, _, rest = entry.partition(" ")
        key, _, count = rest.partition(" ")
        if count.isdigit():
            counts[f"{kind} {key}"] = int(count)
    return counts


def _check(response: RemotingCommand, handle: ReceiptHandle) -> None:
    if response.code == ResponseCode.NO_MESSAGE:
        raise InvalidReceiptHandleError(response.remark or f"receipt handle of offset {handle.offset} is not live")
    if response.code != ResponseCode.SUCCESS:
        raise RemoteError(f"broker {handle.broker_name} answered {response.code}: {response.remark}")
