"""Damaged ConsumeQueue units: the checks every read applies, and the repair from the CommitLog.

A unit is damaged when its size is one no record has, its offset is negative or past the
CommitLog's end, or the record there is not the one it names (total size, magic, topic, queue id,
queue offset, physical offset, as the record stores them). Java's store skips such a unit, hiding
its message; here the units between the nearest intact neighbours are rebuilt from the records the
CommitLog holds between those neighbours' records. A unit whose record is not found there becomes a
blank unit (read as a gap), reported as lost.
"""

from __future__ import annotations

import struct

from sparkmq.errors import StoreError
from sparkmq.message import layout as L
from sparkmq.store.commitlog import CommitLog, Resync, ScannedRecord
from sparkmq.store.consume_queue import BLANK_UNIT_SIZE, UNIT_BYTES, ConsumeQueue
from sparkmq.store.damage import CONSUME_QUEUE, DamageReport
from sparkmq.store.dispatch import TagsCoder, dispatch_columns_plain

ANCHOR_WINDOW = 4096  # units searched each way for an intact neighbour
_UNIT = struct.Struct(">qiq")
_INT32, _INT16 = struct.Struct(">i"), struct.Struct(">h")
_HEAD = struct.Struct(">iiiiiqq")  # total size, magic, body CRC, queue id, flag, queue offset, physical offset
_BLANK_UNIT = _UNIT.pack(0, BLANK_UNIT_SIZE, 0)


class QueueDamage(StoreError):
    """A read met a damaged unit (``queue_offset`` of ``queue``): the store repairs it and reads again."""

    def __init__(self, queue: ConsumeQueue, queue_offset: int) -> None:
        super().__init__(f"ConsumeQueue {queue.topic}/{queue.queue_id} unit {queue_offset} is damaged")
        self.queue = queue
        self.queue_offset = queue_offset


def field_fault(physical: int, size: int) -> str | None:
    """What is wrong with a non-blank unit's fields alone (the rule ``_queueread``'s walk applies to
    every unit it reads), or None."""
    if size < L.RECORD_FIXED_BYTES:
        return f"size {size}"
    if physical < 0:
        return f"offset {physical}"
    return None


def record_fault(commitlog: CommitLog, queue: ConsumeQueue, queue_offset: int, physical: int, size: int) -> str | None:
    """What is wrong with the record a unit of ``queue`` (with sane fields) names, or None: it lies past
    the CommitLog's end or across a segment's end, its head is not the one the unit names, its lengths
    do not add up to its size, or it is another topic's."""
    if physical + size > commitlog.max_offset or physical % commitlog.file_bytes + size > commitlog.file_bytes:
        return f"record {physical}+{size} past the CommitLog's end or its segment's"
    record = commitlog.read(physical, size)
    if record is None:
        return f"record {physical}+{size} past its segment's write position"
    total, magic, _crc, head_queue_id, _flag, head_queue_offset, head_physical = _HEAD.unpack_from(record)
    if (total, magic, head_queue_id, head_queue_offset, head_physical) != (
        size,
        L.MESSAGE_MAGIC_CODE,
        queue.queue_id,
        queue_offset,
        physical,
    ):
        return (
            f"record at {physical} is not the one named (size {total} for {size}, queue {head_queue_id}, "
            f"queue offset {head_queue_offset}, offset {head_physical})"
        )
    fault = lengths_fault(record, physical)
    if fault is None:
        topic_at = L.POS_BODY + _INT32.unpack_from(record, L.POS_BODY_LENGTH)[0]
        topic = bytes(record[topic_at + 1 : topic_at + 1 + record[topic_at]])
        if topic != queue.topic_bytes:
            fault = f"record at {physical} is of topic {topic!r}, not {queue.topic_bytes!r}"
    return fault


def lengths_fault(record: bytes | memoryview, physical: int) -> str | None:
    """What is wrong with a record whose head is sane but whose body, topic and properties lengths do not
    fill exactly its TOTALSIZE (``_queueread``'s lengths_fit), or None."""
    total = len(record)
    (body,) = _INT32.unpack_from(record, L.POS_BODY_LENGTH)
    if body >= 0 and L.RECORD_FIXED_BYTES + body <= total:
        topic = record[L.POS_BODY + body]
        properties_at = L.POS_BODY + body + 1 + topic
        if properties_at + 2 <= total:
            (properties,) = _INT16.unpack_from(record, properties_at)
            if properties >= 0 and L.record_size(body, topic, properties) == total:
                return None
    return f"record at {physical}: its body, topic and properties lengths do not fill its size {total}"


def unit_fault(commitlog: CommitLog, queue: ConsumeQueue, queue_offset: int) -> str | None:
    """What is wrong with the unit at ``queue_offset``, or None (intact, blank, or its record removed)."""
    units = queue.read_unit_bytes(queue_offset, 1)
    if len(units) < UNIT_BYTES:
        return None
    physical, size, _tags = _UNIT.unpack(units)
    if size == BLANK_UNIT_SIZE:
        return None
    fault = field_fault(physical, size)
    if fault is None and physical >= commitlog.min_offset:
        fault = record_fault(commitlog, queue, queue_offset, physical, size)
    elif fault is None and _live_before(commitlog, queue, queue_offset):
        fault = f"offset {physical} below the CommitLog's minimum after a unit above it"
    return fault


def _live_before(commitlog: CommitLog, queue: ConsumeQueue, queue_offset: int) -> bool:
    """Whether the nearest non-blank unit before ``queue_offset`` names a record still in the log."""
    for before in range(queue_offset - 1, max(queue.min_offset, queue_offset - ANCHOR_WINDOW) - 1, -1):
        physical, size, _tags = _UNIT.unpack(queue.read_unit_bytes(before, 1))
        if size != BLANK_UNIT_SIZE:
            return bool(physical >= commitlog.min_offset)
    return False


def repair(commitlog: CommitLog, queue: ConsumeQueue, coder: TagsCoder, damaged: int, report: DamageReport) -> None:
    """Rebuild the damaged units around ``damaged`` from the CommitLog (see the module docstring)."""
    if unit_fault(commitlog, queue, damaged) is None:
        return
    before, start = _anchor(commitlog, queue, damaged, -1)
    after, end = _anchor(commitlog, queue, damaged, 1)
    found: dict[int, tuple[int, int, int]] = {}
    for record in commitlog.scan(start, False, Resync(2**63 - 1, reported_elsewhere)):
        if record.physical_offset >= end:
            break
        if record.topic == queue.topic and record.queue_id == queue.queue_id and before < record.queue_offset < after:
            codes, _, _ = dispatch_columns_plain(coder, queue.topic, [record.properties_raw], [record.store_timestamp])
            found[record.queue_offset] = (record.physical_offset, record.size, codes[0])
    for queue_offset in range(before + 1, after):
        fault = unit_fault(commitlog, queue, queue_offset)
        if fault is None:
            continue
        mapped = queue.files.find(queue_offset * UNIT_BYTES)
        if mapped is None:
            continue
        position = queue_offset * UNIT_BYTES - mapped.start_offset
        unit = found.get(queue_offset)
        mapped.rewrite(position, _BLANK_UNIT if unit is None else _UNIT.pack(*unit))
        where = f"{mapped.path} position {position} ({queue.topic}/{queue.queue_id} queue offset {queue_offset})"
        if unit is None:
            report.found(CONSUME_QUEUE, "lost", where, f"{fault}; no record of it in the CommitLog [{start}, {end})")
        else:
            report.found(CONSUME_QUEUE, "repaired", where, f"{fault}; rebuilt from the record at {unit[0]}")


def reported_elsewhere(_offset: int, _count: int, _record: ScannedRecord | None) -> None:
    """A repair's scan steps over damaged records (recovery, or the units naming them, report those)."""


def _anchor(commitlog: CommitLog, queue: ConsumeQueue, damaged: int, step: int) -> tuple[int, int]:
    """The nearest intact unit from ``damaged`` in direction ``step`` (within ``ANCHOR_WINDOW``):
    its queue offset and, as a CommitLog bound, its record's end (before) or offset (after). Without
    one: the queue's bound and the CommitLog's."""
    low, high = queue.min_offset, queue.max_offset
    queue_offset = damaged + step
    while low <= queue_offset < high and abs(queue_offset - damaged) <= ANCHOR_WINDOW:
        physical, size, _tags = _UNIT.unpack(queue.read_unit_bytes(queue_offset, 1))
        if size != BLANK_UNIT_SIZE and unit_fault(commitlog, queue, queue_offset) is None:
            if physical < commitlog.min_offset:
                break  # removed records: nothing to find before them
            return queue_offset, (physical + size if step < 0 else physical)
        queue_offset += step
    return queue_offset, (commitlog.min_offset if step < 0 else commitlog.max_offset)
