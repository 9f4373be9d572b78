"""A stored message copied on to its group's retry topic or DLQ (send-back, POP revive, gRPC DLQ forwarding)."""

from __future__ import annotations

from sparkmq.broker.context import BrokerContext
from sparkmq.message.properties import encode_properties
from sparkmq.message.record import MessageBatch, StoredMessage
from sparkmq.store import PutResult


def message_copy(message: StoredMessage, topic: str, properties: dict[str, str], reconsume_times: int) -> MessageBatch:
    """``message`` as a new one-message batch for queue 0 of ``topic``, with ``properties``."""
    return MessageBatch(
        topic,
        0,
        [bytes(message.body)],
        [encode_properties(properties)],
        [message.flag],
        message.sys_flag,
        message.born_timestamp,
        message.born_host,
        reconsume_times,
    )


async def store_copy(ctx: BrokerContext, system_topic: str, batch: MessageBatch) -> PutResult:
    """Store ``batch`` once ``system_topic`` (a retry topic or DLQ, one queue) exists; a topic created
    here is on disk before the answer."""
    topics_before = ctx.topics.version
    ctx.topics.create_system_topic(system_topic, 1)
    result = await ctx.put(batch)
    if ctx.topics.version != topics_before:
        await ctx.persister.persist("topics.json")
    return result
