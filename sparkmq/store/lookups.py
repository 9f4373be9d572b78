"""Lookups beside the pull path: a queue's store times, a record by physical offset, messages by key.

``MessageStore`` holds its lock around these (they read segment lists that puts and retention
change); the functions themselves take the parts they read.
"""

from __future__ import annotations

from sparkmq.errors import CorruptRecordError, MessageError
from sparkmq.message import layout as L
from sparkmq.message.record import StoredMessage, decode_record
from sparkmq.store.commitlog import CommitLog
from sparkmq.store.consume_queue import BLANK_UNIT_SIZE, ConsumeQueue


def store_timestamp_at(commitlog: CommitLog, queue: ConsumeQueue, offset: int) -> int:
    """The store time of the record at queue ``offset``; -1 for a blank unit or a record gone."""
    unit = queue.read_units(offset, 1)
    if len(unit) == 0 or int(unit[0]["size"]) == BLANK_UNIT_SIZE:
        return -1
    head = commitlog.read(int(unit[0]["offset"]) + L.POS_STORE_TIMESTAMP, 8)
    return -1 if head is None else int.from_bytes(head, "big", signed=True)


def earliest_message_time(commitlog: CommitLog, queue: ConsumeQueue | None) -> int:
    """Store time of the first live message of ``queue``, -1 when there is none."""
    if queue is None or queue.max_offset <= queue.min_offset:
        return -1
    return store_timestamp_at(commitlog, queue, queue.min_offset)


def offset_by_timestamp(commitlog: CommitLog, queue: ConsumeQueue | None, timestamp: int) -> int:
    """The first queue offset stored at or after ``timestamp`` (the max offset when none is; 0 with no queue)."""
    if queue is None:
        return 0
    lo, hi = queue.min_offset, queue.max_offset
    while lo < hi:
        mid = (lo + hi) // 2
        stored = store_timestamp_at(commitlog, queue, mid)
        if 0 <= stored < timestamp:
            lo = mid + 1
        else:
            hi = mid
    return lo


def record_at(commitlog: CommitLog, physical_offset: int) -> bytes | None:
    """The record bytes at a physical offset, or None when there is none (or it was deleted)."""
    size = commitlog.size_at(physical_offset)
    if size < L.RECORD_FIXED_BYTES:
        return None
    return commitlog.read(physical_offset, size)


def decode_or_none(data: bytes | None) -> StoredMessage | None:
    """``decode_record`` of what ``record_at`` found; None for nothing or bytes that are no record
    (an offset inside a record, as a client's message id may name, reads bytes that fail its checks)."""
    if data is None:
        return None
    try:
        return decode_record(data)
    except (MessageError, CorruptRecordError):
        return None


def has_key(message: StoredMessage, topic: str, key: str) -> bool:
    """Whether an index hit is really ``topic``'s message with ``key`` as its UNIQ_KEY or among its
    KEYS (index entries are hashes, and may outlive their records)."""
    if message.topic != topic:
        return False
    props = message.properties
    return props.get("UNIQ_KEY") == key or key in props.get("KEYS", "").split(" ")
