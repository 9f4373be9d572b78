"""CommitLog: the one append-only log of every stored record, across fixed-size segments."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sparkmq.errors import StoreError
from sparkmq.message import layout as L
from sparkmq.message.record import (
    SMALL_BATCH_MAX,
    Host,
    IntColumn,
    MessageBatch,
    blank_filler,
    encode_records,
    encode_records_plain,
)
from sparkmq.store.mapped_file import MappedFile
from sparkmq.store.mapped_file_queue import MappedFileQueue

_SIZE_MAGIC = struct.Struct(">ii")
_INT16 = struct.Struct(">h")
_MAGIC = struct.pack(">i", L.MESSAGE_MAGIC_CODE)


@dataclass(frozen=True, slots=True)
class Resync:
    """How a scan goes on past bytes that hold no valid record: to the next record proven intact
    (magic, its own offset in its head, sizes, body CRC) stored at or before ``until`` (a store
    timestamp: what was flushed before a crash; a torn put's later records are not), calling
    ``skipped(offset, byte count, the record there when only its body CRC fails, else None)``."""

    until: int
    skipped: Callable[[int, int, ScannedRecord | None], None]


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where a batch went: per-message physical offsets and sizes (lists for small batches)."""

    physical_offsets: IntColumn
    sizes: IntColumn


@dataclass(frozen=True, slots=True)
class ScannedRecord:
    """A valid record met by a recovery scan, with what dispatch needs."""

    physical_offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    sys_flag: int
    store_timestamp: int
    properties_raw: bytes


class CommitLog:
    """Appends batches (one write per segment touched) and reads records by physical offset."""

    def __init__(self, queue: MappedFileQueue, store_host: Host) -> None:
        self.queue = queue
        self.store_host = store_host

    @property
    def file_bytes(self) -> int:
        return self.queue.file_bytes

    @property
    def min_offset(self) -> int:
        return max(self.queue.min_offset, 0)

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    def append(self, batch: MessageBatch, queue_offset: int, store_timestamp: int) -> AppendResult:
        """Append every message of ``batch``; records that do not fit a segment's end go to the next.

        A record never spans segments: when ``size + 8`` exceeds what is left, an 8-byte
        END_OF_FILE filler closes the segment (``CommitLog.doAppend``). Batches of up to
        ``SMALL_BATCH_MAX`` records take ``append_plain`` (lists), larger ones ``append_bulk``.
        """
        if len(batch) <= SMALL_BATCH_MAX:
            return self.append_plain(batch, queue_offset, store_timestamp)
        return self.append_bulk(batch, queue_offset, store_timestamp)

    def append_plain(self, batch: MessageBatch, queue_offset: int, store_timestamp: int) -> AppendResult:
        """``append`` record by record in Python; offsets and sizes come back as lists."""
        sizes = batch.size_list
        if sizes and max(sizes) + L.END_FILE_MIN_BLANK_LENGTH > self.file_bytes:
            raise StoreError(f"a record of {max(sizes)} bytes cannot fit a {self.file_bytes}-byte segment")
        physical: list[int] = []
        first = 0
        while first < len(sizes):
            mapped = self.queue.last_file()
            room = mapped.remaining - L.END_FILE_MIN_BLANK_LENGTH
            stop, used = first, 0
            while stop < len(sizes) and used + sizes[stop] <= room:
                used += sizes[stop]
                stop += 1
            if stop == first:
                mapped.append(blank_filler(mapped.remaining)[: mapped.remaining])
                mapped.mark_full()
                continue
            position = mapped.start_offset + mapped.write_position
            mapped.append(
                encode_records(batch, first, stop, queue_offset + first, position, store_timestamp, self.store_host)
            )
            for size in sizes[first:stop]:
                physical.append(position)
                position += size
            first = stop
        return AppendResult(physical, sizes)

    def append_group(
        self, batches: list[MessageBatch], queue_offsets: list[int], store_timestamp: int
    ) -> list[list[int]] | None:
        """Append small batches (one per request of a group put) with one copy into the current segment.

        Returns each batch's physical offsets, or None (nothing written) when the group does not
        fit what is left of the current segment: the caller then appends batch by batch.
        """
        sizes = [batch.size_list for batch in batches]
        total = sum(map(sum, sizes))
        mapped = self.queue.last_file()
        if total + L.END_FILE_MIN_BLANK_LENGTH > mapped.remaining:
            return None
        position = mapped.start_offset + mapped.write_position
        parts: list[bytes] = []
        physical: list[list[int]] = []
        host = self.store_host
        for batch, queue_offset, batch_sizes in zip(batches, queue_offsets, sizes, strict=True):
            parts.append(encode_records_plain(batch, 0, len(batch), queue_offset, position, store_timestamp, host))
            offsets = []
            for size in batch_sizes:
                offsets.append(position)
                position += size
            physical.append(offsets)
        mapped.append(b"".join(parts))
        return physical

    def append_bulk(self, batch: MessageBatch, queue_offset: int, store_timestamp: int) -> AppendResult:
        """``append`` with numpy columns: one encode and one copy per segment touched."""
        sizes = batch.sizes
        if len(sizes) and int(sizes.max()) + L.END_FILE_MIN_BLANK_LENGTH > self.file_bytes:
            raise StoreError(f"a record of {int(sizes.max())} bytes cannot fit a {self.file_bytes}-byte segment")
        physical = np.empty(len(sizes), dtype=np.int64)
        first = 0
        while first < len(sizes):
            mapped = self.queue.last_file()
            ends = np.cumsum(sizes[first:]) + L.END_FILE_MIN_BLANK_LENGTH
            fit = int(np.searchsorted(ends, mapped.remaining, side="right"))
            if fit == 0:
                mapped.append(blank_filler(mapped.remaining)[: mapped.remaining])
                mapped.mark_full()
                continue
            stop = first + fit
            start = mapped.start_offset + mapped.write_position
            data = encode_records(batch, first, stop, queue_offset + first, start, store_timestamp, self.store_host)
            mapped.append(data)
            physical[first:stop] = start + np.concatenate(([0], np.cumsum(sizes[first : stop - 1])))
            first = stop
        return AppendResult(physical, sizes)

    def read(self, physical_offset: int, size: int) -> bytes | None:
        """The ``size`` bytes at ``physical_offset`` or None when that segment is gone."""
        mapped = self.queue.find(physical_offset)
        if mapped is None:
            return None
        pos = physical_offset - mapped.start_offset
        if pos + size > mapped.write_position:
            return None
        return mapped.read(pos, size)

    def read_runs(self, physical_offsets: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64]) -> list[bytes] | None:
        """Read records: one buffer per segment holding them, its runs (records contiguous in the
        log) back to back; None if any is gone."""
        if len(sizes) == 0:
            return []
        ends = physical_offsets + sizes
        breaks = np.flatnonzero(physical_offsets[1:] != ends[:-1]) + 1
        starts = physical_offsets[np.concatenate(([0], breaks))]
        stops = ends[np.concatenate((breaks, [len(sizes)])) - 1]
        buffers: list[bytes] = []
        first, count = 0, len(starts)
        while first < count:  # interleaved queues give a run per record: read a segment's runs at once
            mapped = self.queue.find(int(starts[first]))
            if mapped is None:
                return None
            base = mapped.start_offset
            last = first + int(np.searchsorted(starts[first:], base + mapped.file_bytes))
            if int(stops[last - 1]) - base > mapped.write_position:
                return None
            buffers.append(mapped.read_spans((starts[first:last] - base).tolist(), (stops[first:last] - base).tolist()))
            first = last
        return buffers

    def size_at(self, physical_offset: int) -> int:
        """TOTALSIZE of the record at ``physical_offset`` (0 if none is there)."""
        head = self.read(physical_offset, 4)
        return int.from_bytes(head, "big", signed=True) if head else 0

    def flush(self) -> int:
        return self.queue.flush()

    def scan(
        self, start_offset: int, check_crc: bool, resync: Resync | None = None
    ) -> Generator[ScannedRecord, None, None]:
        """Valid records from ``start_offset`` on, stopping at the first invalid or empty one;
        with ``resync``, going on past invalid bytes to the next record proven intact (``Resync``).

        After exhausting it, ``self.scan_end`` is the offset just past the last valid record
        (``processOffset`` of RocketMQ's recovery).
        """
        self.scan_end = start_offset
        mapped = self.queue.find(start_offset)
        while mapped is not None:
            pos = start_offset - mapped.start_offset
            with mapped.view() as view:
                limit = mapped.write_position
                while pos + 8 <= limit:
                    size, magic = _SIZE_MAGIC.unpack_from(view, pos)
                    if magic == L.BLANK_MAGIC_CODE and size == limit - pos:
                        pos = limit
                        break
                    record = check_record(view, pos, limit, mapped.start_offset, check_crc)
                    if record is None:
                        resumed = None if resync is None else _next_intact(mapped, view, pos, limit, resync.until)
                        if resumed is None and resync is not None and self._starts_intact(mapped, resync.until):
                            resumed = limit  # the damage runs to this segment's end; the next one is intact
                        if resumed is None:
                            return
                        assert resync is not None
                        damaged = check_record(view, pos, limit, mapped.start_offset, False)
                        if damaged is not None and damaged.size != resumed - pos:
                            damaged = None
                        resync.skipped(mapped.start_offset + pos, resumed - pos, damaged)
                        pos = resumed
                        continue
                    yield record
                    pos += record.size
                    self.scan_end = mapped.start_offset + pos
            if pos < limit:
                return  # a partial head at the very end of the segment
            index = self.queue.files.index(mapped)
            if index + 1 >= len(self.queue.files):
                self.scan_end = mapped.end_offset if pos >= mapped.file_bytes else self.scan_end
                return
            mapped = self.queue.files[index + 1]
            start_offset = mapped.start_offset
            self.scan_end = start_offset

    def _starts_intact(self, mapped: MappedFile, until: int) -> bool:
        """Whether the segment after ``mapped`` begins with a record proven intact, stored at or before ``until``."""
        index = self.queue.files.index(mapped)
        if index + 1 >= len(self.queue.files):
            return False
        following = self.queue.files[index + 1]
        with following.view() as view:
            record = check_record(view, 0, following.write_position, following.start_offset, True)
        return record is not None and record.store_timestamp <= until

    def first_store_timestamp(self, mapped: MappedFile) -> int:
        """STORETIMESTAMP of a segment's first record, 0 if it does not begin with a message."""
        with mapped.view() as view:
            size, magic = _SIZE_MAGIC.unpack_from(view, 0)
            if magic != L.MESSAGE_MAGIC_CODE or size < L.RECORD_FIXED_BYTES:
                return 0
            return int.from_bytes(view[L.POS_STORE_TIMESTAMP : L.POS_STORE_TIMESTAMP + 8], "big", signed=True)


def _next_intact(mapped: MappedFile, view: memoryview, pos: int, limit: int, until: int) -> int | None:
    """The position after ``pos`` of the first record proven intact and stored at or before ``until``
    (its magic found by ``mmap.find``, then every check and its CRC), None when there is none."""
    at = pos + 1
    while True:
        found = mapped.find(_MAGIC, at + L.POS_MAGIC, limit)
        if found < 0:
            return None
        candidate = found - L.POS_MAGIC
        record = check_record(view, candidate, limit, mapped.start_offset, True)
        if record is not None and record.store_timestamp <= until:
            return candidate
        at = candidate + 1


def check_record(view: memoryview, pos: int, limit: int, file_start: int, check_crc: bool) -> ScannedRecord | None:
    """``checkMessageAndReturnSize``: a valid record at ``pos`` or None (magic, sizes, position, CRC)."""
    if limit - pos < L.RECORD_FIXED_BYTES:
        return None
    (total, magic, crc, qid, _flag, qoff, phys, sysflag, _bts, _bip, _bport, sts, *_rest, blen) = (
        L.RECORD_HEAD.unpack_from(view, pos)
    )
    if magic != L.MESSAGE_MAGIC_CODE or total < L.RECORD_FIXED_BYTES or total > limit - pos:
        return None
    if phys != file_start + pos or blen < 0 or L.POS_BODY + blen + 3 > total:
        return None
    body_end = pos + L.POS_BODY + blen
    topic_len = view[body_end]
    props_at = body_end + 1 + topic_len
    if props_at + 2 > pos + total:
        return None
    (props_len,) = _INT16.unpack_from(view, props_at)
    if props_len < 0 or L.record_size(blen, topic_len, props_len) != total:
        return None
    if check_crc and zlib.crc32(view[pos + L.POS_BODY : body_end]) & 0x7FFFFFFF != crc:
        return None
    try:
        topic = bytes(view[body_end + 1 : props_at]).decode("utf-8")
    except UnicodeDecodeError:
        return None
    props = bytes(view[props_at + 2 : props_at + 2 + props_len])
    return ScannedRecord(file_start + pos, total, topic, qid, qoff, sysflag, sts, props)
