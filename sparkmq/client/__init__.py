"""sparkmq's own clients: producers, pull and push consumers (asyncio core, blocking facades)."""

from sparkmq.client.admin import Admin, QueueLag
from sparkmq.client.consume_service import ConsumeResult
from sparkmq.client.message import Message, ReceivedMessage, SendResult, SendStatus
from sparkmq.client.producer import AsyncProducer, Producer
from sparkmq.client.pull_consumer import AsyncPullConsumer, PullConsumer, PullResult
from sparkmq.client.push_consumer import AsyncPushConsumer, PushConsumer
from sparkmq.client.queue_select import select_by_hash
from sparkmq.client.rebalance import allocate_averagely, allocate_averagely_by_circle
from sparkmq.client.security import ClientSecurity
from sparkmq.client.selector import MessageSelector
from sparkmq.client.transaction_producer import (
    AsyncTransactionProducer,
    LocalTransactionState,
    TransactionProducer,
    TransactionSendResult,
)
from sparkmq.protocol.acl_signing import SessionCredentials
from sparkmq.protocol.bodies import MessageQueue

__all__ = [
    "Admin",
    "AsyncProducer",
    "AsyncPullConsumer",
    "AsyncPushConsumer",
    "ConsumeResult",
    "Message",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PushConsumer",
    "QueueLag",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "select_by_hash",
    "AsyncTransactionProducer",
    "LocalTransactionState",
    "TransactionProducer",
    "TransactionSendResult",
    "ClientSecurity",
    "SessionCredentials",
]
