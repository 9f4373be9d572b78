"""What the gRPC servicer asks of the brokers behind it: one interface, two implementations.

``LocalBackend`` is the broker's own store and POP core (proxyMode=LOCAL, the endpoint inside a
broker); ``remote.RemoteBackend`` talks remoting to the brokers a NameServer knows
(proxyMode=CLUSTER, ``sparkmq proxy``). A receipt handle names its broker, so an ack finds it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from rocketmq.grpc_protocol import definition_pb2 as pb

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.delay import redirect_if_delayed
from sparkmq.broker.filtering import SQL92
from sparkmq.broker.grpc import convert
from sparkmq.broker.grpc.telemetry import TelemetryChannel, tx_group
from sparkmq.broker.pop import Popped, PopService, ReceiptHandle
from sparkmq.broker.pop.select import PopRequest, subscription_selector, tags_selector
from sparkmq.broker.subscriptions import SubscriptionGroupConfig
from sparkmq.broker.transactions.state import half_message
from sparkmq.errors import InvalidReceiptHandleError
from sparkmq.message.names import TRANS_HALF_TOPIC, is_system_topic
from sparkmq.message.record import MessageBatch
from sparkmq.store import PutMessageStatus
from sparkmq.store.config import delay_level_millis
from sparkmq.tables.attributes import MESSAGE_TYPE

PERSISTENCE_TIMEOUTS = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
}


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """A topic's queues: per broker group, its name and read / write queue counts."""

    name: str
    message_type: str  # the topic's ``message.type`` attribute; "" when none is known
    brokers: tuple[tuple[str, int, int], ...]

    def accepted_types(self) -> list[int]:
        kind = convert.TYPE_NAMES.get(self.message_type.upper())
        return [kind] if kind is not None else list(convert.ALL_TYPES)

    def read_queues(self) -> list[tuple[str, int]]:
        return [(broker, q) for broker, read, _ in self.brokers for q in range(read)]

    def write_queues(self) -> list[tuple[str, int]]:
        return [(broker, q) for broker, _, write in self.brokers for q in range(write)]


@dataclass(frozen=True, slots=True)
class SendOutcome:
    """One sent message: a ``pb.Code`` with its text, its queue offset, and a half message's (CommitLog offset,
    half queue offset)."""

    code: int
    text: str
    queue_offset: int = 0
    half: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class PopAsk:
    """A receive: up to ``max_nums`` messages of ``topic`` for ``group``, from the broker the client's queue names."""

    broker: str
    group: str
    topic: str
    max_nums: int
    invisible_ms: int
    wait_ms: int
    fifo: bool
    tags: Collection[str] | None
    queue_id: int | None  # a FIFO group's queue; None: any queue of the broker
    sql: str = ""  # a SQL92 filter's expression (then ``tags`` is None)
    attempt_id: str = ""  # the client's name of this receive, the same when it retries


class Backend(Protocol):
    """The brokers behind the gRPC endpoint."""

    max_message_size: int
    level_millis: list[int]
    default_invisible_ms: int
    transactions: bool  # half messages, EndTransaction and check-backs are served

    async def topic(self, name: str, *, create: bool = False) -> TopicRoute | None: ...

    async def group(self, name: str) -> SubscriptionGroupConfig | None: ...

    def group_refusal(self, name: str) -> str: ...

    def available(self, broker: str) -> bool: ...

    async def send(self, items: list[tuple[str, MessageBatch, bool]]) -> list[SendOutcome]: ...

    async def pop(self, ask: PopAsk) -> list[Popped]: ...

    def delivery_attempt(self, group: str, popped: Popped, fifo: bool) -> int: ...

    async def ack(self, group: str, topic: str, handle: str) -> None: ...

    async def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> ReceiptHandle: ...

    async def dead_letter(self, group: str, topic: str, handle: str) -> bool: ...

    async def durable(self) -> None:
        """Until the acks and invisible-time changes recorded so far are as durable as the store's flush."""

    def producer_joined(self, channel: TelemetryChannel, groups: Collection[str]) -> None: ...

    def client_left(self, channel: TelemetryChannel, groups: Collection[str]) -> None: ...


class LocalBackend:
    """The broker's own store and POP core."""

    transactions = True

    def __init__(self, ctx: BrokerContext, pop: PopService) -> None:
        self.ctx = ctx
        self.pop_service = pop
        self.max_message_size = ctx.config.max_message_size
        self.level_millis = delay_level_millis(ctx.config.message_delay_level)
        self.default_invisible_ms = ctx.config.default_invisible_time_mills

    async def topic(self, name: str, *, create: bool = False) -> TopicRoute | None:
        config = self.ctx.topics.get(name)
        if config is None and create and not is_system_topic(name):
            config = self.ctx.topics.create_on_send(name, self.ctx.config.default_topic_queue_nums)
        if config is None:
            return None
        kind = config.attribute_map.get(MESSAGE_TYPE, "")
        queues = (self.ctx.config.broker_name, config.read_queue_nums, config.write_queue_nums)
        return TopicRoute(config.topic_name, kind, (queues,))

    async def group(self, name: str) -> SubscriptionGroupConfig | None:
        return self.ctx.groups.find_or_create(name)

    def group_refusal(self, name: str) -> str:
        return self.ctx.groups.refusal(name)

    def available(self, broker: str) -> bool:
        return True

    async def send(self, items: list[tuple[str, MessageBatch, bool]]) -> list[SendOutcome]:
        max_level = len(self.level_millis)
        batches = []
        for _broker, batch, transactional in items:
            if transactional:
                self.ctx.topics.create_system_topic(TRANS_HALF_TOPIC, 1)
                batches.append(half_message(batch, tx_group(batch.topic)))
            else:
                batches.append(redirect_if_delayed(batch, max_level))
        results, durable = self.ctx.put_group(batches, [True] * len(batches))
        if durable is not None:
            results = await durable
        outcomes = []
        for (_broker, sent, _), batch, result in zip(items, batches, results, strict=True):
            if not result.ok:
                code = PERSISTENCE_TIMEOUTS.get(result.status, pb.INTERNAL_SERVER_ERROR)
                outcomes.append(SendOutcome(code, f"{result.status.value} {result.remark}".strip()))
                continue
            offset = result.queue_offset if batch.topic == sent.topic else 0
            half = (result.wrote_offset, result.queue_offset) if batch.topic == TRANS_HALF_TOPIC else None
            outcomes.append(SendOutcome(pb.OK, "OK", offset, half))
        return outcomes

    async def pop(self, ask: PopAsk) -> list[Popped]:
        """A POP starting a new group at the end (initMode MAX, as Apache's proxy asks); a SQL92 filter needs
        ``enablePropertyFilter`` (PropertyFilterDisabledError, SubscriptionParseError)."""
        enabled = self.ctx.config.enable_property_filter
        selector = subscription_selector(SQL92, ask.sql, enabled) if ask.sql else tags_selector(ask.tags)
        request = PopRequest(
            ask.group,
            ask.topic,
            ask.max_nums,
            ask.invisible_ms,
            fifo=ask.fifo,
            selector=selector,
            queue_id=ask.queue_id,
            init_max=True,
            attempt_id=ask.attempt_id,
        )
        return await self.pop_service.pop_waiting(request, ask.wait_ms)

    def delivery_attempt(self, group: str, popped: Popped, fifo: bool) -> int:
        if not fifo:
            return popped.delivery_attempt
        message = popped.message
        return self.pop_service.fifo_attempt((group, message.topic, message.queue_id), message.queue_offset)

    async def ack(self, group: str, topic: str, handle: str) -> None:
        self.pop_service.ack(group, topic, handle)

    async def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> ReceiptHandle:
        return self.pop_service.change_invisible(group, topic, handle, invisible_ms)

    async def dead_letter(self, group: str, topic: str, handle: str) -> bool:
        """Copy the message to ``%DLQ%group``, then ack it; False when the copy could not be stored."""
        message = self.pop_service.inflight_message(group, topic, ReceiptHandle.decode(handle))
        if not await self.pop_service.resend(message, group, to_dlq=True):
            return False
        with contextlib.suppress(InvalidReceiptHandleError):  # it expired meanwhile: the copy stands
            self.pop_service.ack(group, topic, handle)
        return True

    async def durable(self) -> None:
        await self.pop_service.durable()

    def producer_joined(self, channel: TelemetryChannel, groups: Collection[str]) -> None:
        """The producer becomes a check-back target of its topics' half messages (clientChannelExpiredMs)."""
        for group in groups:
            self.ctx.clients.register_producer(channel.client_id, channel, group, "PYTHON")  # type: ignore[arg-type]

    def client_left(self, channel: TelemetryChannel, groups: Collection[str]) -> None:
        for group in groups:
            self.ctx.clients.unregister(channel.client_id, channel, group, None)  # type: ignore[arg-type]
