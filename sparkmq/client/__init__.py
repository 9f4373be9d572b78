"""sparkmq's own clients: producers, pull and push consumers (asyncio core, blocking facades)."""

from sparkmq.client.message import Message, ReceivedMessage, SendResult, SendStatus
from sparkmq.client.producer import AsyncProducer, Producer, select_by_hash
from sparkmq.client.pull_consumer import AsyncPullConsumer, PullConsumer, PullResult

__all__ = [
    "AsyncProducer", "AsyncPullConsumer", "Message", "Producer", "PullConsumer", "PullResult", "ReceivedMessage",
    "SendResult", "SendStatus", "select_by_hash",
]
