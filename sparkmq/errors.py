"""The one exception tree of sparkmq.

Every error sparkmq raises derives from :class:`SparkmqError` and carries the
RocketMQ response ``code`` that describes it on the wire, a human ``remark``
and whether retrying the same call may succeed (``retriable``)::

    SparkmqError(code, remark, retriable)
    ├── ProtocolError              bytes on the wire that break the remoting protocol
    │   ├── FrameTooLargeError     a frame over MAX_FRAME_BYTES
    │   └── InvalidFieldError      one command's header field or body is missing or malformed
    ├── MessageError               a message that can never be stored as it is
    │   ├── MessageTooLargeError   record over maxMessageSize
    │   │   └── PropertiesTooLargeError  properties over 32767 B (PROPERTIES_SIZE_EXCEEDED)
    │   ├── InvalidTopicError      empty, over 127 bytes, or outside RocketMQ's charset
    │   │   └── TopicNotWritableError  a system topic no producer may send to: NO_PERMISSION (16)
    │   └── TraceDataError         a message trace body that is not TraceDataEncoder's records
    ├── StoreError                 the durable store cannot do what was asked
    │   ├── CorruptRecordError     a record that fails magic, size or CRC checks
    │   ├── StoreClosedError       the store is closed or shutting down
    │   ├── StoreLockedError       another process owns the store directory
    │   ├── StoreIOError           the disk refused a read or write; the remark says what the store was doing
    │   │   └── DiskError          an fsync/msync failed: the store turned read-only
    │   └── SegmentAllocationError a new segment file could not be created (disk full)
    ├── OffsetStoreError           consumer offsets cannot be loaded or persisted
    ├── ConfigError                a bad configuration key or option value
    │   ├── OptionError            a Spark ``.option(...)``; ``option`` names it
    │   └── PropertyFilterDisabledError  a SQL92 subscription to a broker without enablePropertyFilter
    ├── SubscriptionParseError     SUBSCRIPTION_PARSE_FAILED (23): a tag or SQL92 expression that cannot be used
    ├── InvalidReceiptHandleError  a POP receipt handle that is malformed, unknown or expired
    ├── DataLossError              offsets a Spark query needs are gone (retention) or went backwards
    └── RemoteError                an error response from a broker or NameServer
        ├── TopicNotExistError     TOPIC_NOT_EXIST (17)
        ├── BrokerBusyError        SYSTEM_BUSY (2), retriable
        └── DurabilityNotConfirmedError  FLUSH_DISK_TIMEOUT (10), FLUSH_SLAVE_TIMEOUT (12),
                                   SLAVE_NOT_AVAILABLE (11): stored, not confirmed; retriable

Foreign exceptions (``OSError``, ``struct.error``, ``json.JSONDecodeError``) are
translated once, at the boundary that meets them, with ``raise ... from exc``.

Example::

    >>> try:
    ...     raise MessageTooLargeError("record of 5000000 bytes exceeds 4194304")
    ... except SparkmqError as exc:
    ...     (exc.code, exc.retriable)
    (13, False)
"""

from __future__ import annotations

# RocketMQ response codes used by the tree (full table: sparkmq.protocol.codes).
SYSTEM_ERROR = 1
SYSTEM_BUSY = 2
REQUEST_CODE_NOT_SUPPORTED = 3
MESSAGE_ILLEGAL = 13
NO_PERMISSION = 16
TOPIC_NOT_EXIST = 17
SUBSCRIPTION_PARSE_FAILED = 23


class SparkmqError(Exception):
    """Base of every sparkmq error: a RocketMQ response ``code``, a ``remark``, ``retriable``."""

    code: int = SYSTEM_ERROR
    retriable: bool = False

    def __init__(self, remark: str, *, code: int | None = None, retriable: bool | None = None) -> None:
        super().__init__(remark)
        self.remark = remark
        if code is not None:
            self.code = code
        if retriable is not None:
            self.retriable = retriable

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, remark={self.remark!r}, retriable={self.retriable})"


class ProtocolError(SparkmqError):
    """Bytes received that break the remoting protocol; the connection that sent them is closed."""

    code = SYSTEM_ERROR


class FrameTooLargeError(ProtocolError):
    """A frame whose length prefix exceeds the maximum frame size."""


class MessageError(SparkmqError):
    """A message that can never be stored as it is; retrying it unchanged cannot succeed."""

    code = MESSAGE_ILLEGAL


class MessageTooLargeError(MessageError):
    """A record over ``maxMessageSize``."""


class PropertiesTooLargeError(MessageTooLargeError):
    """A properties string over 32767 bytes (its length is a 2-byte field of the record)."""


class InvalidTopicError(MessageError):
    """A topic name that is empty, longer than 127 bytes, or outside ``[%|a-zA-Z0-9_-]``."""

    code = SYSTEM_ERROR


class TopicNotWritableError(InvalidTopicError):
    """A broker's own topic that producers may not send to (``TopicValidator.isNotAllowedSendTopic``)."""

    code = NO_PERMISSION


class TraceDataError(MessageError):
    """A message trace body that does not parse as RocketMQ's ``TraceDataEncoder`` records."""


class StoreError(SparkmqError):
    """The durable store cannot do what was asked."""


class CorruptRecordError(StoreError):
    """A stored record that fails the magic, size or body CRC checks."""


class StoreClosedError(StoreError):
    """The store is closed or shutting down."""

    retriable = True


class StoreLockedError(StoreError):
    """Another process holds the store directory's lock file."""


class StoreIOError(StoreError):
    """The operating system refused a read or write; the remark says what the store was doing.

    The ``OSError`` is the ``__cause__``; ``errno`` is copied for callers that tell ENOSPC from EIO.
    """

    def __init__(self, remark: str, *, errno: int | None = None) -> None:
        super().__init__(remark)
        self.errno = errno


class DiskError(StoreIOError):
    """An fsync or msync failed; the store stops accepting writes until a restart recovers it.

    Linux marks the pages of a failed writeback clean, so a later fsync would "succeed"
    without writing them: the only safe answer is to stop (fail-stop).
    """


class SegmentAllocationError(StoreError):
    """A new segment file could not be created or preallocated (ENOSPC, EIO, ...)."""

    retriable = True


class OffsetStoreError(SparkmqError):
    """Consumer offsets could not be loaded or persisted."""


class ConfigError(SparkmqError):
    """A configuration key or option with a bad value; the remark names it."""


class OptionError(ConfigError):
    """A Spark ``.option(...)`` with a bad name or value; ``option`` names it."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"sparkmq option '{option}': {problem}")
        self.option = option


class PropertyFilterDisabledError(ConfigError):
    """A SQL92 subscription to a broker without ``enablePropertyFilter=true`` (answered SYSTEM_ERROR)."""


class SubscriptionParseError(SparkmqError):
    """SUBSCRIPTION_PARSE_FAILED: a subscription expression that cannot be used; the remark says where."""

    code = SUBSCRIPTION_PARSE_FAILED


class InvalidReceiptHandleError(SparkmqError):
    """A POP receipt handle that does not parse, or names no message still invisible to its group."""


class DataLossError(SparkmqError):
    """Offsets a Spark query needs are gone from the broker (retention) or went backwards."""


class RemoteError(SparkmqError):
    """An error response from a broker or NameServer, with its code and remark."""


class TopicNotExistError(RemoteError):
    """TOPIC_NOT_EXIST: the topic is unknown and auto-creation is off."""

    code = TOPIC_NOT_EXIST


class BrokerBusyError(RemoteError):
    """SYSTEM_BUSY: the broker asks the caller to back off and retry."""

    code = SYSTEM_BUSY
    retriable = True


class DurabilityNotConfirmedError(RemoteError):
    """The broker took a message but could not confirm the flush or replication it promised.

    RocketMQ answers such a send with FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT or
    SLAVE_NOT_AVAILABLE; the message may or may not survive a crash, so it is not delivered.
    ``status`` names the answer (``"FLUSH_DISK_TIMEOUT"``, ...). Sending again may store the
    message twice (at-least-once) but is the only way to be sure: the error is retriable.
    """

    retriable = True

    def __init__(self, remark: str, *, code: int, status: str) -> None:
        super().__init__(remark, code=code)
        self.status = status


class InvalidFieldError(ProtocolError):
    """A well-framed command whose custom header field or JSON body is missing or malformed.

    Unlike its parent it spoils only that one command, not the connection: a server answers it
    with SYSTEM_ERROR and the remark (as Java's ``RemotingCommandException`` is answered), and a
    client fails just that call. ``field`` names the offending extFields key or body path.
    """

    def __init__(self, remark: str, *, field: str, code: int | None = None) -> None:
        super().__init__(remark, code=code)
        self.field = field


__all__ = [
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
