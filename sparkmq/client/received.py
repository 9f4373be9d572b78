"""Consumed messages: a PULL body decoded as columns once, one light ``ReceivedMessage`` per record.

``decode_pull_body`` validates every record of the body in one columnar pass
(:func:`~sparkmq.message.bulk.decode_columns`, numpy; a plain ``struct`` walk for a few
records), keeps the fields as Python lists in one shared :class:`PulledRecords`, and makes one
object per record that holds only that batch and its index. Body bytes, the properties map,
message ids and hosts are computed when first read, so consuming costs a list slot per
message and what the caller actually reads.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from functools import cached_property
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import as_strided

from sparkmq.errors import CorruptRecordError, MessageError
from sparkmq.message import layout as L
from sparkmq.message.bulk import decode_columns
from sparkmq.message.msgid import offset_msg_id
from sparkmq.message.properties import (
    KEY_SEPARATOR,
    KEYS,
    TAGS,
    UNIQ_KEY,
    decode_properties,
)
from sparkmq.message.record import Host, StoredMessage, decode_record, record_starts
from sparkmq.protocol.bodies import MessageQueue

PLAIN_DECODE_MAX = 24
"""Bodies of at most this many records are walked with ``struct`` instead of numpy: numpy's
fixed cost per call (about 40 calls a body) outweighs its per-record gain below this."""

_HEAD_COLUMNS = {
    "queue_ids": "queue_id",
    "queue_offsets": "queue_offset",
    "physical_offsets": "physical_offset",
    "sys_flags": "sys_flag",
    "flags": "flag",
    "born_timestamps": "born_timestamp",
    "store_timestamps": "store_timestamp",
    "reconsume_times": "reconsume_times",
    "born_ports": "born_port",
    "store_ports": "store_port",
}
_ROWS = (*_HEAD_COLUMNS, "body_starts", "body_ends", "props_starts", "props_ends")
Column = list[int] | npt.NDArray[Any]


def _column(name: str) -> cached_property[list[int]]:
    def get(self: PulledRecords) -> list[int]:
        column = self._columns[name]
        return column if isinstance(column, list) else column.tolist()

    return cached_property(get)


class PulledRecords:
    """The records of one PULL body as per-field columns, shared by that body's messages.

    Each column becomes a Python list the first time a message reads that field.
    """

    def __init__(
        self,
        broker_name: str,
        body_buffer: bytes,
        props_buffer: bytes,
        topics: Sequence[str],
        born_ips: bytes,
        store_ips: bytes,
        columns: dict[str, Column],
    ) -> None:
        self.broker_name = broker_name
        self.body_buffer = body_buffer
        self.props_buffer = props_buffer
        self.topics = topics
        self.born_ips = born_ips  # 4 bytes per record
        self.store_ips = store_ips
        self._columns = columns
        self._queues: dict[tuple[str, int], MessageQueue] = {}

    queue_ids = _column("queue_ids")
    queue_offsets = _column("queue_offsets")
    physical_offsets = _column("physical_offsets")
    sys_flags = _column("sys_flags")
    flags = _column("flags")
    born_timestamps = _column("born_timestamps")
    store_timestamps = _column("store_timestamps")
    reconsume_times = _column("reconsume_times")
    born_ports = _column("born_ports")
    store_ports = _column("store_ports")
    body_starts = _column("body_starts")
    body_ends = _column("body_ends")
    props_starts = _column("props_starts")
    props_ends = _column("props_ends")

    def __len__(self) -> int:
        return len(self._columns["queue_offsets"])

    @classmethod
    def of_body(cls, body: bytes, broker_name: str) -> PulledRecords:
        """Every record of a PULL body; raises :class:`CorruptRecordError` if any is not a whole valid record."""
        starts = record_starts(body)
        if len(starts) <= PLAIN_DECODE_MAX:
            at = starts.tolist()
            return cls.of_stored(
                [decode_record(body, start) for start in at], broker_name, body, [start + L.POS_BODY for start in at]
            )
        cols = decode_columns(body, starts)
        heads = cols.heads
        columns: dict[str, Column] = {name: heads[field] for name, field in _HEAD_COLUMNS.items()}
        columns["body_starts"] = cols.body_starts
        columns["body_ends"] = cols.body_starts + cols.body_lengths
        columns["props_starts"] = cols.properties_starts
        columns["props_ends"] = cols.properties_starts + cols.properties_lengths
        records = cls(
            broker_name,
            body,
            body,
            _topics(body, cols.topic_starts, cols.topic_lengths),
            heads["born_ip"].tobytes(),
            heads["store_ip"].tobytes(),
            columns,
        )
        if (heads["sys_flag"] & L.COMPRESSED_FLAG).any():
            records.bodies  # noqa: B018 - inflate now: a body that does not inflate fails the pull, as before
        return records

    @classmethod
    def of_stored(
        cls,
        records: Sequence[StoredMessage],
        broker_name: str,
        buffer: bytes | None = None,
        body_starts: list[int] | None = None,
    ) -> PulledRecords:
        """Records already decoded one by one, from ``buffer`` with bodies at ``body_starts`` if given."""
        if buffer is None or body_starts is None:
            bodies = [bytes(r.body) for r in records]
            buffer, body_starts = b"".join(bodies), _offsets(len(b) for b in bodies)
        props = [r.properties_raw for r in records]
        props_starts = _offsets(len(p) for p in props)
        columns: dict[str, Column] = {
            "queue_ids": [r.queue_id for r in records],
            "queue_offsets": [r.queue_offset for r in records],
            "physical_offsets": [r.physical_offset for r in records],
            "sys_flags": [r.sys_flag for r in records],
            "flags": [r.flag for r in records],
            "born_timestamps": [r.born_timestamp for r in records],
            "store_timestamps": [r.store_timestamp for r in records],
            "reconsume_times": [r.reconsume_times for r in records],
            "body_starts": body_starts,
            "body_ends": [s + len(r.body) for s, r in zip(body_starts, records, strict=True)],
            "props_starts": props_starts,
            "props_ends": [s + len(p) for s, p in zip(props_starts, props, strict=True)],
            "born_ports": [r.born_host.port for r in records],
            "store_ports": [r.store_host.port for r in records],
        }
        pulled = cls(
            broker_name,
            buffer,
            b"".join(props),
            [r.topic for r in records],
            b"".join(r.born_host.ip for r in records),
            b"".join(r.store_host.ip for r in records),
            columns,
        )
        if any(r.sys_flag & L.COMPRESSED_FLAG for r in records):
            pulled.bodies  # noqa: B018 - as in of_body
        return pulled

    def messages(self) -> list[ReceivedMessage]:
        return list(map(ReceivedMessage, repeat(self, len(self)), range(len(self))))

    @cached_property
    def bodies(self) -> list[bytes]:
        """Every record's body, inflated when it was stored compressed."""
        buffer = self.body_buffer
        bodies = [buffer[start:end] for start, end in zip(self.body_starts, self.body_ends, strict=True)]
        for i, sys_flag in enumerate(self.sys_flags):
            if sys_flag & L.COMPRESSED_FLAG:
                try:
                    bodies[i] = zlib.decompress(bodies[i])
                except zlib.error as exc:
                    raise MessageError(
                        f"message at {self.physical_offsets[i]} has a compressed body that does not inflate"
                    ) from exc
        return bodies

    def queue(self, i: int) -> MessageQueue:
        key = (self.topics[i], self.queue_ids[i])
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = MessageQueue(key[0], self.broker_name, key[1])
        return queue


def _topics(body: bytes, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]) -> list[str]:
    """Each record's topic; one shared string when all records name the same topic (a queue's pull)."""
    first = bytes(body[int(starts[0]) : int(starts[0] + lengths[0])])
    if (lengths == lengths[0]).all():
        raw = np.frombuffer(body, dtype=np.uint8)
        windows = as_strided(raw, shape=(len(raw) - len(first) + 1, len(first)), strides=(1, 1), writeable=False)
        if (windows[starts] == np.frombuffer(first, np.uint8)).all():
            return [_utf8_topic(first, int(starts[0]))] * len(starts)
    return [_utf8_topic(body[s : s + n], s) for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]


def _utf8_topic(raw: bytes, at: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"record with topic at {at}: topic is not UTF-8") from exc


def _offsets(lengths: Any) -> list[int]:
    starts, position = [], 0
    for length in lengths:
        starts.append(position)
        position += length
    return starts


class ReceivedMessage:
    """A consumed message with where it was stored; fields are read from its pull's shared records.

    The properties map, body and ids are computed on first access. Messages compare equal when
    every field is equal.
    """

    __slots__ = ("_i", "_properties", "_records")

    def __init__(self, records: PulledRecords, index: int) -> None:
        self._records = records
        self._i = index
        self._properties: dict[str, str] | None = None

    @classmethod
    def of(cls, stored: StoredMessage, broker_name: str) -> ReceivedMessage:
        """Build from one decoded record; its body is inflated if it was stored compressed."""
        return cls(PulledRecords.of_stored([stored], broker_name), 0)

    topic = property(lambda self: self._records.topics[self._i], doc="The topic the record is stored under.")
    body = property(lambda self: self._records.bodies[self._i], doc="The body, inflated if it was compressed.")
    queue = property(lambda self: self._records.queue(self._i), doc="The queue the message was pulled from.")
    queue_offset = property(lambda self: self._records.queue_offsets[self._i])
    commit_log_offset = property(lambda self: self._records.physical_offsets[self._i])
    born_timestamp = property(lambda self: self._records.born_timestamps[self._i])
    store_timestamp = property(lambda self: self._records.store_timestamps[self._i])
    reconsume_times = property(lambda self: self._records.reconsume_times[self._i])
    sys_flag = property(lambda self: self._records.sys_flags[self._i])
    flag = property(lambda self: self._records.flags[self._i])

    @property
    def properties(self) -> dict[str, str]:
        """The parsed properties map (parsed once)."""
        if self._properties is None:
            r, i = self._records, self._i
            self._properties = decode_properties(r.props_buffer[r.props_starts[i] : r.props_ends[i]])
        return self._properties

    @property
    def offset_msg_id(self) -> str:
        """The broker's msgId: store host and commit log offset."""
        r, i = self._records, self._i
        return offset_msg_id(r.store_ips[4 * i : 4 * i + 4], r.store_ports[i], r.physical_offsets[i])

    @property
    def msg_id(self) -> str:
        """The client's unique id (``UNIQ_KEY``), or the offset msgId when the producer set none."""
        return self.properties.get(UNIQ_KEY) or self.offset_msg_id

    @property
    def born_host(self) -> str:
        r, i = self._records, self._i
        return str(Host(r.born_ips[4 * i : 4 * i + 4], r.born_ports[i]))

    @property
    def store_host(self) -> str:
        r, i = self._records, self._i
        return str(Host(r.store_ips[4 * i : 4 * i + 4], r.store_ports[i]))

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(KEYS, "").split(KEY_SEPARATOR) if k]

    def _fields(self) -> tuple[object, ...]:
        return (
            self.topic,
            self.body,
            self.queue,
            self.queue_offset,
            self.commit_log_offset,
            self.msg_id,
            self.offset_msg_id,
            self.properties,
            self.born_timestamp,
            self.store_timestamp,
            self.born_host,
            self.store_host,
            self.reconsume_times,
            self.sys_flag,
            self.flag,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReceivedMessage):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable-looking value, as the dataclass it replaces

    def __repr__(self) -> str:
        return (
            f"ReceivedMessage(topic={self.topic!r}, queue_id={self.queue.queue_id}, queue_offset={self.queue_offset},"
            f" msg_id={self.msg_id!r}, body=<{len(self.body)} bytes>)"
        )


def decode_pull_body(body: bytes, broker_name: str) -> list[ReceivedMessage]:
    """Every record of a PULL body as a ReceivedMessage."""
    return PulledRecords.of_body(body, broker_name).messages() if body else []
