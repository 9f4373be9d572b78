"""IndexFile: message keys → CommitLog offsets, RocketMQ's header + hash slots + chained entries.

Layout (``IndexFile.java``): a 40-byte header, ``slots`` int32 chain heads, then 20-byte
entries ``keyHash i32 | phyOffset i64 | timeDiff i32 (s) | prevIndex i32``. Entry numbers
start at 1; 0 ends a chain. Inserts of a bulk batch (numpy columns) are vectorised
(``put_bulk``); those of a small batch (lists) go one by one with ``struct``
(``put_plain``, the reference). Both write the same bytes.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from sparkmq.errors import DiskError, StoreError
from sparkmq.message.hashing import java_string_hashes, java_utf8_hash
from sparkmq.message.record import IntColumn
from sparkmq.native import queueread
from sparkmq.store import disk
from sparkmq.store.mapped_file import create_full_size

if TYPE_CHECKING:
    from sparkmq.store.lane import EncodedGroup

HEADER_BYTES = 40
SLOT_BYTES = 4
ENTRY_BYTES = 20
ENTRY_DTYPE = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])
_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_SLOT = struct.Struct(">i")
assert _ENTRY.size == ENTRY_DTYPE.itemsize == ENTRY_BYTES
_INT_MAX = 2**31 - 1


def positive_hashes(hashes: npt.NDArray[np.int32]) -> npt.NDArray[np.int64]:
    """``Math.abs(hashCode)``, 0 where it overflows (Integer.MIN_VALUE stays negative in Java)."""
    positive = np.abs(hashes.astype(np.int64))
    positive[positive > _INT_MAX] = 0
    return positive


def index_key_hashes(keys: list[str]) -> npt.NDArray[np.int64]:
    """IndexFile hashes of whole keys (``topic#key``)."""
    return positive_hashes(java_string_hashes(keys))


def index_hash_value(prefix: str, value: bytes) -> int:
    """IndexFile hash of ``prefix + value`` for one UTF-8 ``value`` (the plain path)."""
    h = abs(java_utf8_hash(value, prefix))
    return 0 if h > _INT_MAX else h


class IndexDamage(StoreError):
    """A damaged header, slot or entry of ``index``: the store rebuilds that file from the CommitLog."""

    def __init__(self, index: IndexFile, position: int, detail: str) -> None:
        super().__init__(f"index file {index.path} position {position}: {detail}")
        self.index = index
        self.position = position
        self.detail = detail


class IndexFile:
    """One index file of ``slots`` hash slots and ``entries`` entries."""

    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int

    def __init__(
        self, path: Path, slots: int, entries: int, begin_timestamp: int = 0, begin_phy_offset: int = 0
    ) -> None:
        self.path = path
        self.slots = slots
        self.entries = entries
        self.file_bytes = HEADER_BYTES + slots * SLOT_BYTES + entries * ENTRY_BYTES
        exists = path.exists()
        try:
            if exists:
                fd = os.open(path, os.O_RDWR)
            else:
                head = _HEADER.pack(begin_timestamp, begin_timestamp, begin_phy_offset, begin_phy_offset, 0, 1)
                fd = create_full_size(path, self.file_bytes, head)
            try:
                size = os.fstat(fd).st_size
                if size != self.file_bytes:
                    raise StoreError(f"index file {path} has {size} bytes, not {self.file_bytes}")
                self._mmap = mmap.mmap(fd, self.file_bytes)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StoreError(f"cannot open index file {path}: {exc}") from exc
        self._slots = np.frombuffer(self._mmap, dtype=">i4", count=slots, offset=HEADER_BYTES)
        self._entries = np.frombuffer(
            self._mmap, dtype=ENTRY_DTYPE, count=entries, offset=HEADER_BYTES + slots * SLOT_BYTES
        )
        if exists:
            (
                self.begin_timestamp,
                self.end_timestamp,
                self.begin_phy_offset,
                self.end_phy_offset,
                self.hash_slot_count,
                self.index_count,
            ) = _HEADER.unpack_from(self._mmap, 0)
        else:
            self.begin_timestamp = self.end_timestamp = begin_timestamp
            self.begin_phy_offset = self.end_phy_offset = begin_phy_offset
            self.hash_slot_count, self.index_count = 0, 1
            self._write_header()

    def repair_heads(self) -> int:
        """Point slot heads that name entries past the header's count back at their newest counted entry.

        A put writes its entries and slot heads first and the header last, so a process killed
        in between leaves heads naming uncounted entries. ``select`` stops at such a head and the
        next put would chain past it: every older key of the slot would be lost to queries. The
        counted entries are intact (each only points at earlier ones), so a slot's right head is
        the highest counted entry whose hash falls in it (0: none). Returns the heads repaired.
        """
        heads = self._slots
        bad = (heads >= self.index_count) | (heads < 0)
        if not bad.any():
            return 0
        counted = self._entries["key_hash"][1 : self.index_count].astype(np.int64) % self.slots
        in_bad = bad[counted]
        numbers = np.arange(1, self.index_count, dtype=np.int64)[in_bad]
        slots_of = counted[in_bad]
        repaired = np.zeros(self.slots, dtype=np.int64)
        np.maximum.at(repaired, slots_of, numbers)  # entry numbers grow: the newest per slot
        bad_slots = np.flatnonzero(bad)
        heads[bad_slots] = repaired[bad_slots]
        return len(bad_slots)

    def truncate_entries(self, physical_end: int) -> int:
        """Keep only the entries of records before ``physical_end``; the new index count.

        Entries are in log order, so the kept ones are a prefix; slot heads that named a dropped
        entry are pointed back at their newest kept one (``repair_heads``).
        """
        offsets = self._entries["phy_offset"][1 : self.index_count]
        kept = int(np.searchsorted(offsets, physical_end, side="left"))
        if kept + 1 == self.index_count:
            return self.index_count
        self.index_count = kept + 1
        if kept:
            last = self._entries[kept]
            self.end_phy_offset = int(last["phy_offset"])
            self.end_timestamp = self.begin_timestamp + int(last["time_diff"]) * 1000
        else:
            self.end_phy_offset, self.end_timestamp = self.begin_phy_offset, self.begin_timestamp
        self._write_header()
        self.repair_heads()
        return self.index_count

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.entries

    @property
    def free_entries(self) -> int:
        return max(self.entries - self.index_count, 0)

    def _write_header(self) -> None:
        _HEADER.pack_into(
            self._mmap,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def put(self, hashes: IntColumn, phy_offsets: IntColumn, store_timestamps: IntColumn) -> None:
        """Insert entries in order (the caller keeps within ``free_entries``)."""
        count = len(hashes)
        if count == 0:
            return
        if count > self.entries - self.index_count:  # free_entries, on the hot path
            raise StoreError(f"index file {self.path.name} has room for {self.free_entries} entries, not {count}")
        if self.index_count <= 1:
            self.begin_timestamp = int(store_timestamps[0])
            self.begin_phy_offset = int(phy_offsets[0])
        if isinstance(hashes, list):  # the plain path of a small batch
            if queueread is None or not isinstance(phy_offsets, list) or not isinstance(store_timestamps, list):
                self.put_plain(hashes, phy_offsets, store_timestamps)
            else:  # put_plain in C (tests/native/test_index_put.py)
                self.hash_slot_count += queueread.index_put(
                    self._mmap,
                    self.slots,
                    self.index_count,
                    self.begin_timestamp,
                    hashes,
                    phy_offsets,
                    store_timestamps,
                )
        else:
            self.put_bulk(
                np.asarray(hashes, dtype=np.int64),
                np.asarray(phy_offsets, dtype=np.int64),
                np.asarray(store_timestamps, dtype=np.int64),
            )
        self.index_count += count
        self.end_timestamp = int(store_timestamps[-1])
        self.end_phy_offset = int(phy_offsets[-1])
        self._write_header()

    def put_lane(self, group: EncodedGroup, store_timestamp: int) -> None:
        """``put`` of a placed lane group's index entries (the caller keeps within ``free_entries``),
        written by the group itself (``EncodedGroup.index_into``) without their lists."""
        fresh = self.index_count <= 1
        begin = store_timestamp if fresh else self.begin_timestamp
        written = group.index_into(
            self._mmap,
            self.slots,
            self.index_count,
            begin,
            None if fresh else self.begin_phy_offset,
            self.hash_slot_count,
            store_timestamp,
        )
        if written is None:
            return
        self.hash_slot_count, self.index_count, first, last = written  # the header is written too
        if fresh:
            self.begin_timestamp, self.begin_phy_offset = store_timestamp, first
        self.end_timestamp, self.end_phy_offset = store_timestamp, last

    def put_plain(self, hashes: IntColumn, phy_offsets: IntColumn, store_timestamps: IntColumn) -> None:
        """Write entries one at a time with ``struct`` (the reference of ``put_bulk``); header left to ``put``.

        Like ``put_bulk``, a slot head is trusted only if it names an entry written before
        this batch; within the batch an entry chains to the previous entry of its slot.
        """
        mm = self._mmap
        slots_at = HEADER_BYTES
        entries_at = HEADER_BYTES + self.slots * SLOT_BYTES
        before = self.index_count
        begin = self.begin_timestamp
        chained: dict[int, int] = {}  # slot -> the last entry this batch put there
        number = before
        for key_hash, phy_offset, stored_at in zip(hashes, phy_offsets, store_timestamps, strict=True):
            slot = int(key_hash) % self.slots
            prev = chained.get(slot)
            if prev is None:
                (prev,) = _SLOT.unpack_from(mm, slots_at + slot * SLOT_BYTES)
                if prev <= 0 or prev > before:
                    prev = 0
                    self.hash_slot_count += 1
            diff = min(max((int(stored_at) - begin) // 1000, 0), _INT_MAX) if begin > 0 else 0
            _ENTRY.pack_into(mm, entries_at + number * ENTRY_BYTES, int(key_hash), int(phy_offset), diff, prev)
            _SLOT.pack_into(mm, slots_at + slot * SLOT_BYTES, number)
            chained[slot] = number
            number += 1

    def put_bulk(
        self, hashes: npt.NDArray[np.int64], phy_offsets: npt.NDArray[np.int64], store_timestamps: npt.NDArray[np.int64]
    ) -> None:
        """Write entries with numpy: slot chains of the whole batch at once; header left to ``put``."""
        count = len(hashes)
        before = self.index_count
        slots = hashes % self.slots
        heads = self._slots[slots].astype(np.int64)
        heads[(heads <= 0) | (heads > before)] = 0  # trust only heads naming entries written before
        # Within the batch, an entry chains to the previous entry of its own slot.
        order = np.argsort(slots, kind="stable")
        sorted_slots = slots[order]
        numbers = order + before  # entry numbers in slot order
        same_as_previous = np.append(False, sorted_slots[1:] == sorted_slots[:-1])
        prev = heads[order]
        self.hash_slot_count += int(np.count_nonzero(prev[~same_as_previous] == 0))
        prev[same_as_previous] = numbers[:-1][same_as_previous[1:]]
        prev_in_order = np.empty(count, dtype=np.int64)
        prev_in_order[order] = prev
        if self.begin_timestamp > 0:
            diffs = np.clip((store_timestamps - self.begin_timestamp) // 1000, 0, _INT_MAX)
        else:
            diffs = np.zeros(count, dtype=np.int64)
        block = self._entries[before : before + count]
        block["key_hash"] = hashes
        block["phy_offset"] = phy_offsets
        block["time_diff"] = diffs
        block["prev_index"] = prev_in_order
        last_of_slot = np.append(sorted_slots[1:] != sorted_slots[:-1], True)
        self._slots[sorted_slots[last_of_slot]] = numbers[last_of_slot]

    def header_fault(self) -> str | None:
        """What is wrong with the header's counts and bounds, or None."""
        if not 1 <= self.index_count <= self.entries or not 0 <= self.hash_slot_count <= self.slots:
            return f"header counts {self.index_count} entries, {self.hash_slot_count} slots"
        if not 0 <= self.begin_phy_offset <= self.end_phy_offset or self.begin_timestamp > self.end_timestamp:
            return f"header bounds [{self.begin_phy_offset}, {self.end_phy_offset}]"
        return None

    def select(self, key_hash: int, max_count: int, begin: int, end: int) -> list[int]:
        """Physical offsets of entries with ``key_hash`` stored in [begin, end] ms, newest first.

        Raises :class:`IndexDamage` at a link out of range (a slot head past the count, a previous
        entry not before its entry) or an entry naming a record outside the file's bounds."""
        found: list[int] = []
        slot = key_hash % self.slots
        number = int(self._slots[slot])
        if not 0 <= number < self.index_count:
            raise IndexDamage(self, HEADER_BYTES + slot * SLOT_BYTES, f"slot head {number} of {self.index_count}")
        while number > 0 and len(found) < max_count:
            entry = self._entries[number]  # a view of the mapping: not kept past this line (destroy closes it)
            entry_hash, offset, diff, previous = (int(entry[field]) for field in ENTRY_DTYPE.names or ())
            del entry
            if not self.begin_phy_offset <= offset <= self.end_phy_offset or not 0 <= previous < number:
                at = HEADER_BYTES + self.slots * SLOT_BYTES + number * ENTRY_BYTES
                raise IndexDamage(self, at, f"entry {number}: offset {offset}, previous entry {previous}")
            stored_at = self.begin_timestamp + diff * 1000
            if stored_at < begin:
                break
            if entry_hash == key_hash and stored_at <= end:
                found.append(offset)
            number = previous
        return found

    def overlaps(self, begin: int, end: int) -> bool:
        return self.begin_timestamp <= end and self.end_timestamp >= begin - 1000

    def flush(self) -> None:
        try:
            disk.msync(self._mmap)
        except OSError as exc:
            raise DiskError(f"flush of {self.path} failed: {exc}") from exc

    def close(self) -> None:
        if not self._mmap.closed:
            del self._slots, self._entries
            self._mmap.close()

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
