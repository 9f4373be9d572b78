"""Messages as client code sees them: ``Message`` to send, ``ReceivedMessage`` consumed, ``SendResult``."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sparkmq.client.received import ReceivedMessage, decode_pull_body
from sparkmq.message.properties import (
    DELAY_TIME_LEVEL,
    KEY_SEPARATOR,
    KEYS,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    TAGS,
    UNIQ_KEY,
    WAIT_STORE_MSG_OK,
    encode_properties,
)
from sparkmq.protocol.bodies import MessageQueue

__all__ = [
    "WAIT_FALSE_PREFIX",
    "WAIT_TRUE_PREFIX",
    "Message",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "decode_pull_body",
]


#: WAIT then UNIQ_KEY, as encode_properties joins them: a plain message's properties text is this + its id
#: (a plain message: no properties, tags, keys or delay level).
WAIT_TRUE_PREFIX = f"{WAIT_STORE_MSG_OK}{NAME_VALUE_SEPARATOR}true{PROPERTY_SEPARATOR}{UNIQ_KEY}{NAME_VALUE_SEPARATOR}"
WAIT_FALSE_PREFIX = (
    f"{WAIT_STORE_MSG_OK}{NAME_VALUE_SEPARATOR}false{PROPERTY_SEPARATOR}{UNIQ_KEY}{NAME_VALUE_SEPARATOR}"
)


@dataclass
class Message:
    """A message to send.

    >>> m = Message("orders", b'{"id": 1}', tags="books", keys=["order-1"], properties={"source": "web"})
    >>> m.keys
    ['order-1']
    """

    topic: str
    body: bytes | str
    tags: str | None = None
    keys: str | Sequence[str] | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    delay_level: int = 0
    flag: int = 0
    wait_store_ok: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.keys, str):
            self.keys = [k for k in self.keys.split(KEY_SEPARATOR) if k]

    @property
    def body_bytes(self) -> bytes:
        return self.body.encode("utf-8") if isinstance(self.body, str) else bytes(self.body)

    def encoded_properties(self, unique_id: str) -> bytes:
        """The properties string as sent: user properties plus TAGS, KEYS, DELAY, WAIT, UNIQ_KEY."""
        return self.properties_text(unique_id).encode("utf-8")

    def properties_text(self, unique_id: str) -> str:
        """``encoded_properties`` as text; a message with only the properties every send adds skips the map."""
        if not (self.properties or self.tags or self.keys or self.delay_level > 0):
            return f"{WAIT_TRUE_PREFIX if self.wait_store_ok else WAIT_FALSE_PREFIX}{unique_id}"
        props = dict(self.properties)
        if self.tags:
            props[TAGS] = self.tags
        if self.keys:
            props[KEYS] = KEY_SEPARATOR.join(self.keys)
        if self.delay_level > 0:
            props[DELAY_TIME_LEVEL] = str(self.delay_level)
        props[WAIT_STORE_MSG_OK] = "true" if self.wait_store_ok else "false"
        props[UNIQ_KEY] = unique_id
        return encode_properties(props).decode("utf-8")


class SendStatus(enum.Enum):
    """How the broker stored a sent message (RocketMQ's SendStatus).

    sparkmq's producers return only ``SEND_OK``: the other three are raised as
    :class:`~sparkmq.errors.DurabilityNotConfirmedError`, whose ``status`` is the member's name.
    """

    SEND_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3


class SendResult:
    """The outcome of a send: ``msg_id`` is the client's unique id, ``offset_msg_id`` the broker's. Immutable.

    A plain class with read-only properties over slots, not a frozen dataclass: a producer's answer makes one
    with ``object.__new__`` and six slot stores, no ``__init__`` frame per send; ``msg_id`` is then rendered
    when read, from the id's head and its last four hex digits (``_id_tail``, -1 when ``_msg_id`` is whole), and
    ``queue_offset`` from the answer's decimal text.

    >>> SendResult(SendStatus.SEND_OK, "ID", "OFFSET", None, 7)  # doctest: +ELLIPSIS
    SendResult(status=<SendStatus.SEND_OK: 0>, msg_id='ID', offset_msg_id='OFFSET', queue=None, queue_offset=7)
    """

    __slots__ = ("_id_tail", "_msg_id", "_offset_msg_id", "_queue", "_queue_offset", "_status")
    __match_args__ = ("status", "msg_id", "offset_msg_id", "queue", "queue_offset")
    _queue_offset: int | str  # a producer's answer's decimal text until read

    def __init__(
        self, status: SendStatus, msg_id: str, offset_msg_id: str, queue: MessageQueue, queue_offset: int
    ) -> None:
        self._status, self._msg_id, self._offset_msg_id = status, msg_id, offset_msg_id
        self._queue, self._queue_offset = queue, queue_offset
        self._id_tail = -1

    @property
    def status(self) -> SendStatus:
        return self._status

    @property
    def msg_id(self) -> str:
        if self._id_tail >= 0:
            return f"{self._msg_id}{self._id_tail:04X}"
        return self._msg_id

    @property
    def offset_msg_id(self) -> str:
        return self._offset_msg_id

    @property
    def queue(self) -> MessageQueue:
        return self._queue

    @property
    def queue_offset(self) -> int:
        offset = self._queue_offset
        if isinstance(offset, str):  # a producer's answer leaves the int() to the first read
            self._queue_offset = offset = int(offset)
        return offset

    def _values(self) -> tuple[SendStatus, str, str, MessageQueue, int]:
        return self._status, self.msg_id, self._offset_msg_id, self._queue, self.queue_offset

    def __eq__(self, other: object) -> bool:
        return self._values() == other._values() if type(other) is SendResult else NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={value!r}" for name, value in zip(self.__match_args__, self._values(), strict=True))
        return f"SendResult({values})"
