"""Encode and decode RocketMQ v1 stored records (the CommitLog and PULL body layout).

A record is ``88-byte head | body | int8 topic length | topic | int16 properties length |
properties``; see ``layout.py`` for positions. Encoding is columnar: a whole batch of
messages for one queue becomes one contiguous buffer with one numpy pass for the heads.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

from sparkmq.errors import CorruptRecordError, InvalidTopicError, MessageTooLargeError
from sparkmq.message import layout as L
from sparkmq.message.msgid import offset_msg_id
from sparkmq.message.properties import decode_properties

HEAD_DTYPE = np.dtype(
    [
        ("total_size", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("queue_id", ">i4"),
        ("flag", ">i4"), ("queue_offset", ">i8"), ("physical_offset", ">i8"), ("sys_flag", ">i4"),
        ("born_timestamp", ">i8"), ("born_ip", "u1", (4,)), ("born_port", ">i4"),
        ("store_timestamp", ">i8"), ("store_ip", "u1", (4,)), ("store_port", ">i4"),
        ("reconsume_times", ">i4"), ("prepared_transaction_offset", ">i8"), ("body_length", ">i4"),
    ]
)
assert HEAD_DTYPE.itemsize == L.HEADER_BYTES

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_SIZE_AND_MAGIC = struct.Struct(">ii")
_TOPIC_CHARSET = frozenset(b"%|abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def validate_topic(topic: str) -> bytes:
    """UTF-8 bytes of a valid topic (``TopicValidator``: ≤127 bytes, ``[%|a-zA-Z0-9_-]``)."""
    encoded = topic.encode("utf-8")
    if not encoded:
        raise InvalidTopicError("topic is empty")
    if len(encoded) > L.MAX_TOPIC_BYTES:
        raise InvalidTopicError(f"topic of {len(encoded)} bytes exceeds {L.MAX_TOPIC_BYTES}: {topic[:40]!r}…")
    if not _TOPIC_CHARSET.issuperset(encoded):
        raise InvalidTopicError(f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]")
    return encoded


@dataclass(frozen=True, slots=True)
class Host:
    """An IPv4 host and port as stored in a record (``ip`` is 4 bytes)."""

    ip: bytes
    port: int

    def __str__(self) -> str:
        return f"{'.'.join(str(b) for b in self.ip)}:{self.port}"


@dataclass
class MessageBatch:
    """Messages for one topic and queue, to be appended as consecutive records.

    Per-message columns: ``bodies``, ``properties`` (encoded strings, see
    ``encode_properties``) and ``flags``. Everything else is shared by the batch, as in
    RocketMQ's SEND_BATCH_MESSAGE.

    >>> b = MessageBatch("TopicTest", 0, [b"hi"], [b"TAGS\\x01A"])
    >>> len(b)
    1
    """

    topic: str
    queue_id: int
    bodies: Sequence[bytes]
    properties: Sequence[bytes]
    flags: Sequence[int] | None = None
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: Host = field(default_factory=lambda: Host(b"\x7f\x00\x00\x01", 0))
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    def __len__(self) -> int:
        return len(self.bodies)

    @cached_property
    def topic_bytes(self) -> bytes:
        return validate_topic(self.topic)

    @cached_property
    def sizes(self) -> npt.NDArray[np.int64]:
        """TOTALSIZE of each record this batch becomes."""
        n = len(self.bodies)
        if len(self.properties) != n or (self.flags is not None and len(self.flags) != n):
            raise ValueError("bodies, properties and flags must have the same length")
        body_lens = np.fromiter(map(len, self.bodies), dtype=np.int64, count=n)
        prop_lens = np.fromiter(map(len, self.properties), dtype=np.int64, count=n)
        if n and int(prop_lens.max()) > L.MAX_PROPERTIES_BYTES:
            raise MessageTooLargeError(f"properties of {int(prop_lens.max())} bytes exceed {L.MAX_PROPERTIES_BYTES}")
        return L.RECORD_FIXED_BYTES + len(self.topic_bytes) + body_lens + prop_lens

    def check_sizes(self, max_message_bytes: int) -> None:
        """Raise MessageTooLargeError when any record would exceed ``max_message_bytes``."""
        if len(self) and int(self.sizes.max()) > max_message_bytes:
            worst = int(np.argmax(self.sizes))
            raise MessageTooLargeError(
                f"message {worst} of topic {self.topic!r} is {int(self.sizes[worst])} bytes, over maxMessageSize {max_message_bytes}"
            )


def encode_records(
    batch: MessageBatch,
    first: int,
    stop: int,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    store_host: Host,
) -> bytes:
    """Records ``first:stop`` of ``batch`` as one contiguous buffer starting at ``physical_offset``.

    Queue offsets run consecutively from ``queue_offset``; one store timestamp for all.
    """
    count = stop - first
    sizes = batch.sizes[first:stop]
    bodies = batch.bodies[first:stop]
    props = batch.properties[first:stop]
    heads = np.empty(count, dtype=HEAD_DTYPE)
    heads["total_size"] = sizes
    heads["magic"] = L.MESSAGE_MAGIC_CODE
    heads["body_crc"] = [zlib.crc32(b) & 0x7FFFFFFF for b in bodies]
    heads["queue_id"] = batch.queue_id
    heads["flag"] = 0 if batch.flags is None else batch.flags[first:stop]
    heads["queue_offset"] = np.arange(queue_offset, queue_offset + count, dtype=np.int64)
    heads["physical_offset"] = physical_offset + np.concatenate(([0], np.cumsum(sizes)[:-1])) if count else 0
    heads["sys_flag"] = batch.sys_flag & ~(L.BORNHOST_V6_FLAG | L.STOREHOST_V6_FLAG)  # hosts are always IPv4
    heads["born_timestamp"] = batch.born_timestamp
    heads["born_ip"] = np.frombuffer(batch.born_host.ip, dtype=np.uint8)
    heads["born_port"] = batch.born_host.port
    heads["store_timestamp"] = store_timestamp
    heads["store_ip"] = np.frombuffer(store_host.ip, dtype=np.uint8)
    heads["store_port"] = store_host.port
    heads["reconsume_times"] = batch.reconsume_times
    heads["prepared_transaction_offset"] = batch.prepared_transaction_offset
    heads["body_length"] = [len(b) for b in bodies]
    head_bytes = memoryview(heads.tobytes())
    topic_part = bytes([len(batch.topic_bytes)]) + batch.topic_bytes
    parts: list[bytes | memoryview] = []
    append = parts.append
    for i in range(count):
        prop = props[i]
        append(head_bytes[i * L.HEADER_BYTES : (i + 1) * L.HEADER_BYTES])
        append(bodies[i])
        append(topic_part + len(prop).to_bytes(2, "big") + prop)
    return b"".join(parts)


def blank_filler(remaining: int) -> bytes:
    """The 8-byte END_OF_FILE marker written when a record does not fit a segment."""
    return _SIZE_AND_MAGIC.pack(remaining, L.BLANK_MAGIC_CODE)


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One decoded record. ``body`` is a zero-copy view when decoded from a memoryview."""

    total_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: Host
    store_timestamp: int
    store_host: Host
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes | memoryview
    topic: str
    properties_raw: bytes

    @property
    def properties(self) -> dict[str, str]:
        """The parsed properties map."""
        return decode_properties(self.properties_raw)

    @property
    def offset_msg_id(self) -> str:
        """The broker msgId: store host + physical offset."""
        return offset_msg_id(self.store_host.ip, self.store_host.port, self.physical_offset)


def decode_record(buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = False) -> StoredMessage:
    """Decode the record at ``pos``; raise CorruptRecordError if it is not a whole valid record."""
    view = memoryview(buf)
    if len(view) - pos < L.RECORD_FIXED_BYTES:
        raise CorruptRecordError(f"record at {pos}: {len(view) - pos} bytes left, fewer than a record head")
    try:
        head = L.RECORD_HEAD.unpack_from(view, pos)
    except struct.error as exc:
        raise CorruptRecordError(f"record at {pos}: {exc}") from exc
    total, magic, crc, qid, flag, qoff, phys, sysflag, bts, bip, bport, sts, sip, sport, recon, ptx, blen = head
    if magic != L.MESSAGE_MAGIC_CODE:
        raise CorruptRecordError(f"record at {pos}: magic {magic & 0xFFFFFFFF:#010x} is not a message")
    if sysflag & (L.BORNHOST_V6_FLAG | L.STOREHOST_V6_FLAG):
        raise CorruptRecordError(f"record at {pos}: IPv6 hosts are never stored by sparkmq")
    if total < L.RECORD_FIXED_BYTES or total > len(view) - pos or blen < 0 or L.POS_BODY + blen + 1 > total:
        raise CorruptRecordError(f"record at {pos}: size {total} / body length {blen} do not fit the buffer")
    body_end = pos + L.POS_BODY + blen
    topic_len = view[body_end]
    props_len_at = body_end + 1 + topic_len
    if props_len_at + 2 > pos + total:
        raise CorruptRecordError(f"record at {pos}: topic length {topic_len} runs past the record")
    (props_len,) = _INT16.unpack_from(view, props_len_at)
    if props_len < 0 or L.record_size(blen, topic_len, props_len) != total:
        raise CorruptRecordError(f"record at {pos}: TOTALSIZE {total} does not match its field lengths")
    body = view[pos + L.POS_BODY : body_end]
    if check_crc and zlib.crc32(body) & 0x7FFFFFFF != crc:
        raise CorruptRecordError(f"record at {pos}: body CRC mismatch")
    try:
        topic = bytes(view[body_end + 1 : props_len_at]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"record at {pos}: topic is not UTF-8") from exc
    return StoredMessage(
        total, crc, qid, flag, qoff, phys, sysflag, bts, Host(bytes(bip), bport), sts, Host(bytes(sip), sport),
        recon, ptx, body, topic, bytes(view[props_len_at + 2 : props_len_at + 2 + props_len]),
    )


def iter_records(buf: bytes | bytearray | memoryview, *, check_crc: bool = False) -> Iterator[StoredMessage]:
    """Decode every record of a buffer of whole records (a PULL body), in order."""
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        message = decode_record(view, pos, check_crc=check_crc)
        yield message
        pos += message.total_size


def record_starts(buf: bytes | bytearray | memoryview) -> npt.NDArray[np.int64]:
    """Start positions of the whole records in ``buf`` (walks TOTALSIZE; checks each fits)."""
    view = memoryview(buf)
    end = len(view)
    starts = []
    pos = 0
    unpack = _INT32.unpack_from
    while pos < end:
        if end - pos < L.RECORD_FIXED_BYTES:
            raise CorruptRecordError(f"record at {pos}: {end - pos} trailing bytes, fewer than a record head")
        (size,) = unpack(view, pos)
        if size < L.RECORD_FIXED_BYTES or size > end - pos:
            raise CorruptRecordError(f"record at {pos}: size {size} does not fit the buffer")
        starts.append(pos)
        pos += size
    return np.array(starts, dtype=np.int64)
