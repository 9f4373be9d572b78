"""ConsumeQueue: one queue's index into the CommitLog, 20-byte units of (offset, size, tagsCode)."""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import numpy as np
import numpy.typing as npt

from sparkmq.message.record import IntColumn
from sparkmq.store.disk import store_io
from sparkmq.store.mapped_file import MappedFile, MapPool, offset_to_file_name
from sparkmq.store.mapped_file_queue import MappedFileQueue

UNIT_BYTES = 20  # CQ_STORE_UNIT_SIZE
UNIT_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
assert UNIT_DTYPE.itemsize == UNIT_BYTES
BLANK_UNIT_SIZE = 2**31 - 1  # fillPreBlank writes {0, Integer.MAX_VALUE, 0}
_UNIT = struct.Struct(">qiq")
_BLANK_UNIT = _UNIT.pack(0, BLANK_UNIT_SIZE, 0)
_BLANK_RUN_READ = 64  # units read at a time while stepping over blank units
# recover reads one page's units first, then 4x more each time: the first touch of a page of
# a sparse file is a page fault that can cost ~0.2 ms, so an idle queue must touch few.
_RECOVER_FIRST_CHUNK = 4096 // UNIT_BYTES
_RECOVER_CHUNK = 16384
logger = logging.getLogger(__name__)


def encode_units_plain(offsets: IntColumn, sizes: IntColumn, tags_codes: IntColumn) -> bytes:
    """Units for the given columns, one ``struct.pack`` each (the reference of ``encode_units_bulk``)."""
    pack = _UNIT.pack
    return b"".join([pack(int(o), int(s), int(t)) for o, s, t in zip(offsets, sizes, tags_codes, strict=True)])


def encode_units_bulk(offsets: IntColumn, sizes: IntColumn, tags_codes: IntColumn) -> bytes:
    """Units for the given columns through one numpy structured array."""
    units = np.empty(len(offsets), dtype=UNIT_DTYPE)
    units["offset"] = offsets
    units["size"] = sizes
    units["tags_code"] = tags_codes
    return units.tobytes()


class ConsumeQueue:
    """The units of ``topic``/``queue_id``; logical offset k lives at byte ``20*k``."""

    def __init__(self, topic: str, queue_id: int, root: Path, units_per_file: int, pool: MapPool | None = None) -> None:
        self.topic = topic
        self.topic_bytes = topic.encode()  # as its records store it
        self.queue_id = queue_id
        self.files = MappedFileQueue(root / topic / str(queue_id), units_per_file * UNIT_BYTES, pool=pool)
        self.min_logic_offset = 0  # byte offset of the first live unit
        self.max_physical_offset = -1  # end (offset + size) of the last unit's record

    @property
    def max_offset(self) -> int:
        """The next logical offset to write (``getMaxOffsetInQueue``)."""
        return self.files.max_offset // UNIT_BYTES

    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // UNIT_BYTES

    def load(self) -> bool:
        """Open the files; when one is missing between others, delete them all and return False.

        A hole cannot be filled in place (units are found by position), so a queue with one
        is dropped whole and rebuilt from the CommitLog by the caller.
        """
        directory = self.files.directory
        names = os.listdir(directory) if directory.is_dir() else []
        starts = sorted(int(name) for name in names if len(name) == 20 and name.isdigit())
        if any(b - a != self.files.file_bytes for a, b in pairwise(starts)):
            logger.warning(
                "ConsumeQueue %s/%d lacks a file between %s: dropped for a rebuild",
                self.topic,
                self.queue_id,
                [offset_to_file_name(s) for s in starts],
            )
            for start in starts:
                with store_io(f"dropping ConsumeQueue file {directory / offset_to_file_name(start)}"):
                    (directory / offset_to_file_name(start)).unlink()
            return False
        self.files.load()
        return True

    def recover(self, zero_tail: bool = True) -> int:
        """Find the last valid unit from the third-from-last file on; cut after it.

        Reads units in chunks and stops at the first invalid one, so a queue costs what it
        holds in its last files, not their size. ``zero_tail=False`` (the page cache survived:
        nothing was written past a zero unit) skips zeroing the rest of the file when the
        first invalid unit is all zeros. Returns the end physical offset of the last valid
        unit (-1 when there is none).
        """
        files = self.files.files
        end = files[0].start_offset if files else 0
        clean_cut = False
        for number in range(max(len(files) - 3, 0), len(files)):
            mapped = files[number]
            valid, last_end, clean_cut = _valid_prefix(mapped)
            if last_end >= 0:
                self.max_physical_offset = last_end
            end = mapped.start_offset + valid * UNIT_BYTES
            if valid < mapped.file_bytes // UNIT_BYTES:
                clean_cut = clean_cut and number == len(files) - 1
                break
        if files and clean_cut and not zero_tail:
            files[-1].write_position = files[-1].flushed_position = end - files[-1].start_offset
        else:
            self.files.truncate_dirty(end)
        if files:
            self.min_logic_offset = max(self.min_logic_offset, files[0].start_offset)
        return self.max_physical_offset

    def append(self, queue_offset: int, offsets: IntColumn, sizes: IntColumn, tags_codes: IntColumn) -> None:
        """Write units for consecutive logical offsets from ``queue_offset``.

        Units already present are skipped (replay is idempotent); a gap before
        ``queue_offset`` is filled with blank units so positions stay aligned.
        """
        if self.max_offset - queue_offset >= len(offsets):
            return
        encode = encode_units_plain if isinstance(offsets, list) else encode_units_bulk  # lists: a small batch
        self.append_units(queue_offset, encode(offsets, sizes, tags_codes), int(offsets[-1]) + int(sizes[-1]))

    def append_units(self, queue_offset: int, units: bytes, end: int) -> None:
        """:meth:`append` of units already encoded (``end``: their last record's offset + size)."""
        files = self.files.files
        if files:  # the common case, checked first: the units continue the queue in its last file
            last = files[-1]
            at = last.write_position
            if last.start_offset + at == queue_offset * UNIT_BYTES and at and at + len(units) < last.file_bytes:
                last.append(units)
                self.max_physical_offset = end
                return
        current = self.max_offset
        skip = current - queue_offset
        if skip * UNIT_BYTES >= len(units):
            return
        if skip > 0:
            units, queue_offset = units[skip * UNIT_BYTES :], current
        if not self.files.files:
            self.min_logic_offset = queue_offset * UNIT_BYTES
        elif queue_offset > current:
            self._write(_BLANK_UNIT * (queue_offset - current))
        self._write(units)
        self.max_physical_offset = end

    def _write(self, data: bytes) -> None:
        files = self.files.files
        if files and len(data) <= files[-1].remaining and (len(files) > 1 or files[-1].write_position):
            files[-1].append(data)  # the common case: it fits the current file
            if not files[-1].is_full:
                return
            data = b""
        view = memoryview(data)
        while view:
            mapped = self.files.last_file(self.min_logic_offset)
            if len(files) == 1 and mapped.write_position == 0 and mapped.start_offset < self.min_logic_offset:
                mapped.append(_BLANK_UNIT * ((self.min_logic_offset - mapped.start_offset) // UNIT_BYTES))
            take = min(mapped.remaining, len(view))
            mapped.append(view[:take])
            view = view[take:]
        if files and files[-1].is_full:
            # The next file exists as soon as one fills: a full last file at start-up then
            # means the files after it were lost (see recovery.lost_queue_start).
            self.files.last_file()

    def read_units(self, start: int, max_count: int) -> npt.NDArray[np.void]:
        """Up to ``max_count`` units from logical offset ``start`` (copied, across files)."""
        return np.frombuffer(self.read_unit_bytes(start, max_count), dtype=UNIT_DTYPE)

    def read_unit_bytes(self, start: int, max_count: int) -> bytes:
        """``read_units`` as the raw 20-byte units."""
        parts = []
        offset = start * UNIT_BYTES
        end = min(self.files.max_offset, offset + max_count * UNIT_BYTES)
        while offset < end:
            mapped = self.files.find(offset)
            if mapped is None:
                break
            pos = offset - mapped.start_offset
            take = min(end - offset, mapped.write_position - pos)
            if take <= 0:
                break
            parts.append(mapped.read(pos, take))
            offset += take
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def blank_unit_of(self, queue_offset: int, physical: int, size: int) -> bool:
        """Blank the unit at ``queue_offset`` if it names the record at ``physical`` of ``size`` bytes."""
        if not self.min_offset <= queue_offset < self.max_offset:
            return False
        if _UNIT.unpack(self.read_unit_bytes(queue_offset, 1))[:2] != (physical, size):
            return False
        mapped = self.files.find(queue_offset * UNIT_BYTES)
        assert mapped is not None
        mapped.rewrite(queue_offset * UNIT_BYTES - mapped.start_offset, _BLANK_UNIT)
        return True

    def last_unit(self) -> np.void | None:
        if self.max_offset <= self.min_offset:
            return None
        unit: np.void = self.read_units(self.max_offset - 1, 1)[0]
        return unit

    def truncate_after_physical(self, physical_end: int) -> None:
        """Drop units whose record ends after ``physical_end`` (``truncateDirtyLogicFiles``)."""
        if 0 <= self.max_physical_offset <= physical_end and self.files.files:
            return  # the last unit ends the furthest: nothing to drop
        if self.max_offset > self.min_offset:
            first_dirty = self._first_unit_ending_after(physical_end)
            if first_dirty < self.max_offset:
                self.files.truncate_dirty(first_dirty * UNIT_BYTES)
        last = self.last_unit()
        self.max_physical_offset = -1 if last is None else int(last["offset"]) + int(last["size"])
        if not self.files.files:
            self.min_logic_offset = 0

    def _first_unit_ending_after(self, physical_end: int) -> int:
        """The first real unit whose record ends after ``physical_end`` (the max offset if none)."""
        return self._first_real_unit_where(lambda offset, size: offset + size > physical_end)

    def correct_min_offset(self, commitlog_min: int) -> None:
        """Advance the minimum to the first unit whose record is still in the CommitLog."""
        if self.max_offset <= self.min_offset:
            return
        first = self._first_real_unit_where(lambda offset, _size: offset >= commitlog_min)
        self.min_logic_offset = max(self.min_logic_offset, first * UNIT_BYTES)

    def _first_real_unit_where(self, holds: Callable[[int, int], bool]) -> int:
        """Binary search over [min, max) for the first real unit where ``holds(offset, size)``.

        Real units are ordered by physical offset, so a predicate that is monotone in it
        splits them once; blank units are stepped over. Reads O(log n) units, not the queue.
        """
        lo, hi = self.min_offset, self.max_offset
        real, offset, size = self._next_real_unit(lo, hi)
        if real >= hi or holds(offset, size):  # the usual answer at start-up: the first unit
            return real
        while True:
            found = self._search(real + 1, hi, holds)
            if found >= hi:
                return found
            # A damaged unit (a wild offset) breaks the order: the answer holds for the unit after it too.
            real, offset, size = self._next_real_unit(found + 1, hi)
            if real >= hi or holds(offset, size):
                return found

    def _search(self, lo: int, hi: int, holds: Callable[[int, int], bool]) -> int:
        """``_first_real_unit_where``'s binary search over [lo, hi) (``hi`` if no unit holds)."""
        found = hi
        while lo < hi:
            mid = (lo + hi) // 2
            real, offset, size = self._next_real_unit(mid, hi)
            if real >= hi:
                hi = mid
            elif holds(offset, size):
                found, hi = real, mid
            else:
                lo = real + 1
        return found

    def _next_real_unit(self, start: int, stop: int) -> tuple[int, int, int]:
        """(index, offset, size) of the first non-blank unit in [start, stop); index ``stop`` if none."""
        while start < stop:
            units = self.read_units(start, min(stop - start, _BLANK_RUN_READ))
            if len(units) == 0:
                break
            sizes = units["size"]  # a unit of a negative size or offset is damage, stepped over as a blank
            real = np.flatnonzero((sizes != BLANK_UNIT_SIZE) & (sizes > 0) & (units["offset"] >= 0))
            if len(real):
                unit = units[int(real[0])]
                return start + int(real[0]), int(unit["offset"]), int(unit["size"])
            start += len(units)
        return stop, 0, 0

    def first_real_unit(self) -> tuple[int, int] | None:
        """(logical offset, physical offset) of the first non-blank live unit, None if there is none."""
        index, offset, _size = self._next_real_unit(self.min_offset, self.max_offset)
        return None if index >= self.max_offset else (index, offset)

    def delete_expired(self, commitlog_min: int) -> int:
        """Delete files whose last unit points below the CommitLog minimum; fix the minimum."""

        def expired(mapped: MappedFile) -> bool:
            with mapped.view() as view:
                units = np.frombuffer(view, dtype=UNIT_DTYPE)
                last = units[-1]
                result = int(last["size"]) > 0 and int(last["offset"]) + int(last["size"]) <= commitlog_min
                del units, last
            return result

        deleted = self.files.delete_while(expired)
        if self.files.files:
            self.min_logic_offset = max(self.min_logic_offset, self.files.files[0].start_offset)
        self.correct_min_offset(commitlog_min)
        return deleted

    def flush(self, least_bytes: int = 0) -> None:
        """Sync the unflushed units; with ``least_bytes``, only once at least that many wait."""
        if least_bytes <= 0 or self.files.unflushed_bytes >= least_bytes:
            self.files.flush()

    def close(self) -> None:
        self.files.close()

    def destroy(self) -> None:
        self.files.destroy()


def _valid_prefix(mapped: MappedFile) -> tuple[int, int, bool]:
    """(valid units from the file start, end of the last real one or -1, whether the first
    invalid unit is all zeros), reading from one page's units up to ``_RECOVER_CHUNK`` at a time.

    An invalid unit that is not all zeros ends the queue only when zeros follow it (a torn write);
    followed by a valid unit, or by the file's end, it is damage inside the queue: kept, so the units
    after it stay, and repaired from the CommitLog by the read that meets it (``queue_repair``)."""
    total = mapped.file_bytes // UNIT_BYTES
    valid, last_end, zero_after = total, -1, True
    chunk = bad = last = None
    with mapped.view() as view:
        units = np.frombuffer(view, dtype=UNIT_DTYPE)
        start, step = 0, _RECOVER_FIRST_CHUNK
        while start < total and valid == total:
            chunk = units[start : start + step]
            bad = np.flatnonzero((chunk["offset"] < 0) | (chunk["size"] <= 0))
            for index in (start + int(b) for b in bad):
                after = _damage_run_end(units, index)
                if after < 0:
                    valid = index
                    zero_after = not units[index : index + 1].tobytes().strip(b"\0")
                    break
            start, step = start + len(chunk), min(step * 4, _RECOVER_CHUNK)
        for index in range(valid - 1, -1, -1):  # the last real unit: back over damaged ones, not blanks
            last = units[index]
            if int(last["size"]) == BLANK_UNIT_SIZE:
                break
            if int(last["offset"]) >= 0 and int(last["size"]) > 0:
                last_end = int(last["offset"]) + int(last["size"])
                break
        del units, chunk, bad, last
    return valid, last_end, zero_after


def _damage_run_end(units: npt.NDArray[np.void], index: int) -> int:
    """Past the run of invalid non-zero units from ``index``: the next valid unit's index (or the
    file's end), or -1 when the run ends in a zero unit (or ``index`` is zero itself): a torn tail."""
    for at in range(index, len(units)):
        unit = units[at]
        if not units[at : at + 1].tobytes().strip(b"\0"):
            return -1
        if int(unit["offset"]) >= 0 and int(unit["size"]) > 0:
            return at
    return len(units)
