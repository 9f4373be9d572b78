"""Messages as client code sees them: ``Message`` to send, ``ReceivedMessage`` consumed, ``SendResult``."""

from __future__ import annotations

import enum
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sparkmq.errors import MessageError
from sparkmq.message import layout as L
from sparkmq.message.msgid import offset_msg_id
from sparkmq.message.properties import (
    DELAY_TIME_LEVEL, KEY_SEPARATOR, KEYS, TAGS, UNIQ_KEY, WAIT_STORE_MSG_OK, decode_properties, encode_properties,
)
from sparkmq.message.record import StoredMessage, iter_records
from sparkmq.protocol.bodies import MessageQueue


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
        props = dict(self.properties)
        if self.tags:
            props[TAGS] = self.tags
        if self.keys:
            props[KEYS] = KEY_SEPARATOR.join(self.keys)
        if self.delay_level > 0:
            props[DELAY_TIME_LEVEL] = str(self.delay_level)
        props[WAIT_STORE_MSG_OK] = "true" if self.wait_store_ok else "false"
        props[UNIQ_KEY] = unique_id
        return encode_properties(props)


class SendStatus(enum.Enum):
    """How the broker stored a sent message (RocketMQ's SendStatus).

    sparkmq's producers return only ``SEND_OK``: the other three are raised as
    :class:`~sparkmq.errors.DurabilityNotConfirmedError`, whose ``status`` is the member's name.
    """

    SEND_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3


@dataclass(frozen=True, slots=True)
class SendResult:
    """The outcome of a send: ``msg_id`` is the client's unique id, ``offset_msg_id`` the broker's."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A consumed message with where it was stored."""

    topic: str
    body: bytes
    queue: MessageQueue
    queue_offset: int
    commit_log_offset: int
    msg_id: str
    offset_msg_id: str
    properties: dict[str, str]
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    sys_flag: int
    flag: int

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(KEYS, "").split(KEY_SEPARATOR) if k]

    @classmethod
    def of(cls, stored: StoredMessage, broker_name: str) -> ReceivedMessage:
        """Build from a stored record; inflates compressed bodies."""
        body = bytes(stored.body)
        if stored.sys_flag & L.COMPRESSED_FLAG:
            try:
                body = zlib.decompress(body)
            except zlib.error as exc:
                raise MessageError(f"message at {stored.physical_offset} has a compressed body that does not inflate") from exc
        props = decode_properties(stored.properties_raw)
        offset_id = offset_msg_id(stored.store_host.ip, stored.store_host.port, stored.physical_offset)
        return cls(stored.topic, body, MessageQueue(stored.topic, broker_name, stored.queue_id), stored.queue_offset,
                   stored.physical_offset, props.get(UNIQ_KEY, offset_id), offset_id, props, stored.born_timestamp,
                   stored.store_timestamp, str(stored.born_host), str(stored.store_host), stored.reconsume_times,
                   stored.sys_flag, stored.flag)


def decode_pull_body(body: bytes, broker_name: str) -> list[ReceivedMessage]:
    """Every record of a PULL body as a ReceivedMessage."""
    return [ReceivedMessage.of(stored, broker_name) for stored in iter_records(body)]
