"""sparkmq: Apache RocketMQ's design rebuilt in Python, native to Spark Structured Streaming.

The package root exports the public API only: the clients for services that are not Spark
jobs (producer, pull and push consumers, their message and result types) and the exception
tree of :mod:`sparkmq.errors`.

Example::

    >>> import sparkmq
    >>> issubclass(sparkmq.OffsetStoreError, sparkmq.SparkmqError)
    True

Sending needs a running NameServer and broker::

    with sparkmq.Producer("PID_orders", "127.0.0.1:9876") as producer:
        producer.send(sparkmq.Message("orders", b"hello", tags="books"))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sparkmq.client as _client
from sparkmq.errors import (
    BrokerBusyError,
    ConfigError,
    CorruptRecordError,
    DataLossError,
    DiskError,
    DurabilityNotConfirmedError,
    FrameTooLargeError,
    InvalidFieldError,
    InvalidReceiptHandleError,
    InvalidTopicError,
    MessageError,
    MessageTooLargeError,
    OffsetStoreError,
    OptionError,
    PropertiesTooLargeError,
    PropertyFilterDisabledError,
    ProtocolError,
    RemoteError,
    SegmentAllocationError,
    SparkmqError,
    StoreClosedError,
    StoreError,
    StoreIOError,
    StoreLockedError,
    SubscriptionParseError,
    TopicNotExistError,
    TopicNotWritableError,
    TraceDataError,
)

__version__ = "0.1.0"

if TYPE_CHECKING:  # resolved lazily at run time by __getattr__ below
    from sparkmq.client import (
        Admin,
        AsyncProducer,
        AsyncPullConsumer,
        AsyncPushConsumer,
        AsyncTransactionProducer,
        ClientSecurity,
        ConsumeResult,
        LocalTransactionState,
        Message,
        MessageSelector,
        Producer,
        PullConsumer,
        PullResult,
        PushConsumer,
        QueueLag,
        ReceivedMessage,
        SendResult,
        SendStatus,
        SessionCredentials,
        TransactionProducer,
        TransactionSendResult,
        allocate_averagely,
        allocate_averagely_by_circle,
        select_by_hash,
    )
    from sparkmq.embedded import EmbeddedCluster
    from sparkmq.protocol.bodies import MessageQueue
    from sparkmq.protocol.heartbeat import MessageModel

_HOMES = {  # the public names imported on first use, by module
    **dict.fromkeys(_client.__all__, "sparkmq.client"),
    "EmbeddedCluster": "sparkmq.embedded",  # the broker and the store: never needed by clients and Spark workers
    "MessageModel": "sparkmq.protocol.heartbeat",
}


def __getattr__(name: str) -> object:
    """The clients are imported on first use: a Spark worker reading a partition needs the pull
    path only, not the producers, the push consumer, the admin client (or the broker)."""
    return _client.lazy_attribute(globals(), _HOMES, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


def register(spark: object) -> None:
    """Register the ``sparkmq`` Spark data source with ``spark`` (imports pyspark only when called).

    Without this call ``format("sparkmq")`` still works: ``pyspark_sparkmq.DefaultSource``
    is found by PySpark's data source lookup.
    """
    from sparkmq.source import register as register_source

    register_source(spark)


__all__ = [
    "Admin",
    "AsyncProducer",
    "AsyncPullConsumer",
    "AsyncPushConsumer",
    "AsyncTransactionProducer",
    "ClientSecurity",
    "ConsumeResult",
    "EmbeddedCluster",
    "LocalTransactionState",
    "Message",
    "MessageModel",
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
    "SessionCredentials",
    "TransactionProducer",
    "TransactionSendResult",
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "register",
    "select_by_hash",
    "BrokerBusyError",
    "ConfigError",
    "CorruptRecordError",
    "DataLossError",
    "DiskError",
    "DurabilityNotConfirmedError",
    "FrameTooLargeError",
    "InvalidFieldError",
    "InvalidReceiptHandleError",
    "InvalidTopicError",
    "MessageError",
    "MessageTooLargeError",
    "OffsetStoreError",
    "OptionError",
    "PropertiesTooLargeError",
    "PropertyFilterDisabledError",
    "ProtocolError",
    "RemoteError",
    "SegmentAllocationError",
    "SparkmqError",
    "StoreClosedError",
    "StoreError",
    "StoreIOError",
    "StoreLockedError",
    "SubscriptionParseError",
    "TopicNotExistError",
    "TopicNotWritableError",
    "TraceDataError",
]
