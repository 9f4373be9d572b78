"""sparkmq: Apache RocketMQ's design rebuilt in Python, native to Spark Structured Streaming.

The package root exports the public API only. For now that is the exception tree of
:mod:`sparkmq.errors`; clients, the broker and the Spark data source join it as they land.

Example::

    >>> import sparkmq
    >>> issubclass(sparkmq.OffsetStoreError, sparkmq.SparkmqError)
    True
"""

from __future__ import annotations

from sparkmq.errors import (
    BrokerBusyError,
    ConfigError,
    CorruptRecordError,
    FrameTooLargeError,
    InvalidFieldError,
    InvalidTopicError,
    MessageError,
    MessageTooLargeError,
    OffsetStoreError,
    ProtocolError,
    RemoteError,
    SparkmqError,
    StoreClosedError,
    StoreError,
    StoreLockedError,
    TopicNotExistError,
)

__version__ = "0.1.0"

__all__ = [
    "BrokerBusyError",
    "ConfigError",
    "CorruptRecordError",
    "FrameTooLargeError",
    "InvalidFieldError",
    "InvalidTopicError",
    "MessageError",
    "MessageTooLargeError",
    "OffsetStoreError",
    "ProtocolError",
    "RemoteError",
    "SparkmqError",
    "StoreClosedError",
    "StoreError",
    "StoreLockedError",
    "TopicNotExistError",
]
