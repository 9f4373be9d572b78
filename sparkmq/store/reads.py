"""Reading a queue: ConsumeQueue units → tag filter → CommitLog runs, with RocketMQ's statuses."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import numpy as np
import numpy.typing as npt

from sparkmq.message import layout as L
from sparkmq.native import queueread
from sparkmq.store.commitlog import CommitLog
from sparkmq.store.consume_queue import BLANK_UNIT_SIZE, UNIT_BYTES, ConsumeQueue
from sparkmq.store.queue_repair import QueueDamage, record_fault
from sparkmq.store.status import GetMessageStatus, GetResult

MAX_FILTER_SCAN_UNITS = 16_000  # maxFilterMessageCount: units scanned per read when filtering
# A record filter reads and evaluates each candidate in Python: scan fewer units per read so one
# pull never holds the store (and the broker's loop) for long; the client simply pulls again.
MAX_RECORD_FILTER_SCAN_UNITS = 2_048
# CommitLog segments one native read copies from (MAX_SEGMENTS in queueread.c); a read over more
# (a tag filter's sparse matches over tiny segments) takes the numpy path.
MAX_READ_SEGMENTS = 16
RecordFilter = Callable[[bytes], bool]  # the raw properties of a stored record -> keep it?
_Read = Any  # what a _queueread gather returns (see its .pyi)
#: A pull's SUCCESS answer but for the read: (header template parts, opaque, suggestWhichBrokerId,
#: the suggestion when the last record lies below the next value, that physical offset).
FrameAnswer = tuple[tuple[bytes, bytes, bytes, bytes, bytes, bytes], int, int, int, int]


def read_queue(
    commitlog: CommitLog,
    queue: ConsumeQueue | None,
    offset: int,
    max_count: int,
    max_bytes: int,
    tags_codes: Collection[int] | None,
    record_filter: RecordFilter | None = None,
) -> GetResult:
    """``DefaultMessageStore.getMessage`` for one queue, moving records as whole runs.

    ``tags_codes`` filters on ConsumeQueue units; ``record_filter`` (SQL92) then sees each
    remaining candidate's properties, read from the CommitLog. Raises :class:`QueueDamage` at the
    first damaged unit met (``queue_repair``'s rules: every unit read, then each record taken).
    """
    if queue is None:
        return GetResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    low, high = queue.min_offset, queue.max_offset
    if high == 0:
        return GetResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, low, high)
    if offset < low:
        return GetResult(GetMessageStatus.OFFSET_TOO_SMALL, low, low, high)
    if offset == high:
        return GetResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, low, high)
    if offset > high:
        return GetResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, high, low, high)
    if record_filter is not None:
        window = max(max_count, MAX_RECORD_FILTER_SCAN_UNITS)
    else:
        window = max_count if tags_codes is None else max(max_count, MAX_FILTER_SCAN_UNITS)
        if queueread is not None:
            read = _read_natively(commitlog, queue, offset, window, max_count, max_bytes, tags_codes)
            if read is not None:
                return read
    units = queue.read_units(offset, min(window, high - offset))
    physical = units["offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    wanted = sizes != BLANK_UNIT_SIZE
    cl_min = commitlog.min_offset
    removed = wanted & (physical < cl_min)
    damaged = wanted & ((sizes < L.RECORD_FIXED_BYTES) | (physical < 0))
    live = np.flatnonzero(wanted & ~removed)
    if len(live):  # records go up the log with the queue: one below a live one is no removed record
        damaged[live[0] :] |= removed[live[0] :]
    if damaged.any():
        raise QueueDamage(queue, offset + int(np.argmax(damaged)))
    wanted &= ~removed
    if tags_codes is not None:
        wanted &= np.isin(units["tags_code"].astype(np.int64), np.fromiter(tags_codes, dtype=np.int64))
    matched = np.flatnonzero(wanted)
    seen = len(units)
    if record_filter is not None and len(matched):
        matched, seen = _filter_records(commitlog, physical, sizes, matched, max_count, record_filter, seen)
    rows = matched[:max_count]
    if len(rows):
        within = np.cumsum(sizes[rows]) <= max_bytes
        within[0] = True  # one message always goes, however large
        rows = rows[: len(rows) if within.all() else int(np.argmin(within))]
    # Stopped by a limit: resume right after the last record taken; else every unit was seen.
    scanned = int(rows[-1]) + 1 if len(rows) < len(matched) else seen
    next_offset = offset + scanned
    if len(rows) == 0:
        status = GetMessageStatus.MESSAGE_WAS_REMOVING if removed.any() else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetResult(status, next_offset, low, high)
    for row in rows.tolist():
        if record_fault(commitlog, queue, offset + row, int(physical[row]), int(sizes[row])) is not None:
            raise QueueDamage(queue, offset + row)
    buffers = commitlog.read_runs(physical[rows], sizes[rows])
    if buffers is None:
        return GetResult(GetMessageStatus.MESSAGE_WAS_REMOVING, next_offset, low, high)
    return GetResult(
        GetMessageStatus.FOUND, next_offset, low, high, buffers, offset + rows, physical[rows], sizes[rows]
    )


def _read_natively(
    commitlog: CommitLog,
    queue: ConsumeQueue,
    offset: int,
    window: int,
    max_count: int,
    max_bytes: int,
    tags_codes: Collection[int] | None,
) -> GetResult | None:
    """``read_queue`` without a record filter in one C call (``_queueread.gather``, the same rules);
    None when a record's CommitLog segment is gone (or it lies past the write position): the numpy
    path reads those."""
    assert queueread is not None
    low, high = queue.min_offset, queue.max_offset
    read = _gather(queueread.gather, commitlog, queue, offset, window, max_count, max_bytes, tags_codes)
    if read is None:
        return None
    scanned, removed, taken, body, queue_offsets, physical, sizes = read
    if not taken:
        status = GetMessageStatus.MESSAGE_WAS_REMOVING if removed else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetResult(status, offset + scanned, low, high)
    assert body is not None and queue_offsets is not None and physical is not None and sizes is not None
    return GetResult(
        GetMessageStatus.FOUND,
        offset + scanned,
        low,
        high,
        [body],
        np.frombuffer(queue_offsets, dtype=np.int64),
        np.frombuffer(physical, dtype=np.int64),
        np.frombuffer(sizes, dtype=np.int64),
    )


def read_frame(
    commitlog: CommitLog,
    queue: ConsumeQueue | None,
    offset: int,
    max_count: int,
    max_bytes: int,
    tags_codes: Collection[int] | None,
    answer: FrameAnswer,
    out: bytearray | None = None,
    reserve: int = 0,
) -> tuple[bytes | int, int, int] | None:
    """A ``read_queue`` that finds records (no record filter), as its whole PULL response frame
    (``_queueread.gather_frame``): (frame, records, body bytes); with ``out`` the frame is appended
    to it instead (grown to at least ``reserve`` bytes when it lacks room) and the first item is
    its new length. None for every other read (not FOUND, a segment gone, no native code):
    ``read_queue`` serves and answers those.
    """
    if queueread is None or queue is None:
        return None
    low, high = queue.min_offset, queue.max_offset
    if not low <= offset < high:
        return None
    window = max_count if tags_codes is None else max(max_count, MAX_FILTER_SCAN_UNITS)
    into = () if out is None else (out, reserve)
    read = _gather(
        queueread.gather_frame,
        commitlog,
        queue,
        offset,
        window,
        max_count,
        max_bytes,
        tags_codes,
        *answer,
        low,
        high,
        *into,
    )
    return read if isinstance(read, tuple) else None


def _gather(
    function: Callable[..., _Read],
    commitlog: CommitLog,
    queue: ConsumeQueue,
    offset: int,
    window: int,
    max_count: int,
    max_bytes: int,
    tags_codes: Collection[int] | None,
    *extra: object,
) -> _Read | None:
    """``function`` (a ``_queueread`` gather) over the units from ``offset``, given the CommitLog
    segments of the first unit (and of the last, without a tag filter: it takes every unit up to a
    limit), then of each record taken that those do not hold; None when such a segment is gone or
    a read would need more than ``MAX_READ_SEGMENTS``. Raises :class:`QueueDamage` as ``read_queue``."""
    units = queue.read_unit_bytes(offset, min(window, queue.max_offset - offset))
    if not units:
        return None
    cl_min = commitlog.min_offset
    find = commitlog.queue.find
    first = find(int.from_bytes(units[:8], "big", signed=True))
    mapped = [] if first is None else [first]
    if tags_codes is None and first is not None:
        # Without a tag filter the read takes every unit up to a limit: when the last one lies past the
        # first segment (and is not a blank), give its segment too, so no second call is needed.
        last_offset = int.from_bytes(units[-UNIT_BYTES : 8 - UNIT_BYTES], "big", signed=True)
        if last_offset >= first.start_offset + first.file_bytes and (
            int.from_bytes(units[8 - UNIT_BYTES : 12 - UNIT_BYTES], "big") != BLANK_UNIT_SIZE
        ):
            last = find(last_offset)
            if last is not None:
                mapped.append(last)
    views: list[memoryview] = []
    try:
        while len(mapped) <= MAX_READ_SEGMENTS:
            for segment in mapped[len(views) :]:
                views.append(segment.view())
            segments = tuple(
                [
                    (segment.start_offset, view, segment.write_position)
                    for segment, view in zip(mapped, views, strict=True)
                ]
            )
            queue_args = (segments, queue.queue_id, queue.topic_bytes)
            read = function(units, offset, cl_min, tags_codes, max_count, max_bytes, *queue_args, *extra)
            if not isinstance(read, int):
                return read
            if read < 0:
                raise QueueDamage(queue, offset - 1 - read)
            holder = find(read)
            if holder is None:
                return None
            mapped.append(holder)
        return None
    finally:
        for view in views:
            view.release()


def _filter_records(
    commitlog: CommitLog,
    physical: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    candidates: npt.NDArray[np.intp],
    max_count: int,
    keep: RecordFilter,
    seen: int,
) -> tuple[npt.NDArray[np.intp], int]:
    """The candidates whose properties ``keep`` accepts, read chunk by chunk until ``max_count``
    are found; returns them and how many units were seen (all, unless it stopped early)."""
    chunk = max(2 * max_count, 256)
    kept: list[int] = []
    for first in range(0, len(candidates), chunk):
        rows = candidates[first : first + chunk]
        buffers = commitlog.read_runs(physical[rows], sizes[rows])
        if buffers is None:  # a segment went away meanwhile: take none of this chunk
            break
        row_sizes = iter(sizes[rows].tolist())
        row_ids = iter(rows.tolist())
        for buffer in buffers:
            view, pos = memoryview(buffer), 0
            while pos < len(buffer):
                row, size = next(row_ids), next(row_sizes)
                if keep(_properties_of(view, pos)):
                    kept.append(row)
                pos += size
        if len(kept) >= max_count:
            return np.asarray(kept, dtype=np.intp), int(rows[-1]) + 1
    return np.asarray(kept, dtype=np.intp), seen


def _properties_of(view: memoryview, pos: int) -> bytes:
    """The raw properties of the record at ``pos`` (fixed v1 positions)."""
    body_len = int.from_bytes(view[pos + L.POS_BODY_LENGTH : pos + L.POS_BODY], "big")
    topic_at = pos + L.POS_BODY + body_len
    props_at = topic_at + 1 + view[topic_at]
    props_len = int.from_bytes(view[props_at : props_at + 2], "big")
    return bytes(view[props_at + 2 : props_at + 2 + props_len])
