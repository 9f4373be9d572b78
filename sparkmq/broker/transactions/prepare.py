"""The send side of a transaction: a prepared message becomes a half message."""

from __future__ import annotations

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.transactions.state import half_message
from sparkmq.message.names import TRANS_HALF_TOPIC
from sparkmq.message.record import MessageBatch
from sparkmq.remoting import RemotingConnection


def prepare_half(
    context: BrokerContext, batch: MessageBatch, producer_group: str, connection: RemotingConnection
) -> MessageBatch:
    """``TransactionalMessageServiceImpl.prepareMessage``: the batch to store instead of ``batch``.

    The connection that sent a half message is a live producer of its group, so the check-back
    can reach it before the client's first heartbeat names the broker (C++ clients heartbeat
    every 30 s, and their first one may come before they know any broker). A later heartbeat
    on the same connection replaces this entry with the client's own id.
    """
    context.topics.create_system_topic(TRANS_HALF_TOPIC, 1)
    if connection.id not in context.clients.producers.get(producer_group, {}):
        context.clients.register_producer(f"{connection.peer[0]}:{connection.peer[1]}", connection, producer_group)
    return half_message(batch, producer_group)
