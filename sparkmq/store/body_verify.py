"""Body CRC checks of the records recovery did not check, once per process, without taxing reads.

Recovery checks the body CRC (``checkCRCOnRecover``) of the records from its scan start on; the
records before it (everything below the anchor after a clean exit) were not checked. A
``BodyVerifier`` covers them:

* a background walk goes through them once, segment by segment, at a bounded rate: each chunk is
  read (``pread``, not through the mapping: a file cut short under the broker is a short read, not
  a SIGBUS) under the store lock and checked outside it, so puts and reads wait for a copy at most.
  A read that fails or comes short halts the walk, reported once (``commitlog``/``unreadable``):
  the records it did not reach stay checked by the reads that serve them;
* until the walk has passed a record, a pull that would serve it checks its CRC first (the broker's
  native frame read declines such reads; ``get_messages`` checks the records it takes), and a lookup
  by physical offset does the same. A record checked that way is not checked again by the walk;
* a record whose body fails its CRC is reported once (its file and position, the damage metric
  ``commitlog``/``lost``), the ConsumeQueue unit naming it is blanked (reads move past it, the
  broker's and Spark's local reads alike), and lookups by offset or key no longer find it.

What is guaranteed when: a broker pull or lookup never serves a body that fails its CRC, from the
first request on. Spark's local reads read ``UNVERIFIED_FILE`` (the range not yet walked) and pull
from the broker any read that touches it; once the walk ends the file is removed and they read
the files again. Bytes that change after they were checked (the disk decays under a running
broker) are found by the next start's walk.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from sparkmq.message import layout as L
from sparkmq.store import disk
from sparkmq.store.commitlog import CommitLog, Resync, ScannedRecord
from sparkmq.store.consume_queue import BLANK_UNIT_SIZE, ConsumeQueue
from sparkmq.store.damage import COMMIT_LOG, DamageReport
from sparkmq.store.queue_repair import lengths_fault

logger = logging.getLogger(__name__)
UNVERIFIED_FILE = "unverified"  # "<from> <to>": the CommitLog range not yet walked (connector/local_reads.py)
CHUNK_BYTES = 64 * 1024  # copied under the store lock, then walked holding the GIL (~0.3 ms), per step
MARKER_STEP_BYTES = 16 * 1024 * 1024  # the walk's progress is published to UNVERIFIED_FILE this often
_HEAD = struct.Struct(">iiiiiqq")  # total size, magic, body CRC, queue id, flag, queue offset, physical offset
_INT32 = struct.Struct(">i")
MAX_FIRST_READ_CHECKS = 1_000_000  # records checked ahead of the walk that are remembered


def blank_units_naming(
    queues: Mapping[tuple[str, int], ConsumeQueue], head: bytes | None, physical: int, size: int
) -> bool:
    """Blank the ConsumeQueue unit naming the record at ``physical`` (``size`` bytes) whose first
    28 bytes are ``head`` (its queue id and queue offset), in whichever topic holds it."""
    if head is None or len(head) < 28 or int.from_bytes(head[:4], "big", signed=True) != size:
        return False
    queue_id = int.from_bytes(head[12:16], "big", signed=True)
    queue_offset = int.from_bytes(head[20:28], "big", signed=True)
    blanked = False
    for (_topic, each_id), queue in queues.items():
        if each_id == queue_id and queue.blank_unit_of(queue_offset, physical, size):
            blanked = True
    return blanked


def body_intact(record: bytes | memoryview) -> bool:
    """Whether a whole record's body matches its BODYCRC (``record`` has sane lengths)."""
    crc = int.from_bytes(record[L.POS_BODY_CRC : L.POS_BODY_CRC + 4], "big", signed=True)
    body_len = int.from_bytes(record[L.POS_BODY_LENGTH : L.POS_BODY], "big", signed=True)
    return zlib.crc32(record[L.POS_BODY : L.POS_BODY + body_len]) & 0x7FFFFFFF == crc


class BodyVerifier:
    """The range ``[frontier, end)`` not yet checked, its walk, and the checks of first reads.

    ``lock`` is the store's: the methods called from reads expect it held; the walk takes it.
    """

    def __init__(
        self,
        commitlog: CommitLog,
        queues: Mapping[tuple[str, int], ConsumeQueue],
        damage: DamageReport,
        lock: threading.RLock,
        marker: Path,
    ) -> None:
        self.commitlog = commitlog
        self.queues = queues
        self.damage = damage
        self.lock = lock
        self.marker = marker
        self.frontier = self.end = 0
        self.done = threading.Event()
        self.halted = threading.Event()  # a read of the walk failed: it stops there
        self._checked: set[int] = set()  # records at or past the frontier checked by a read
        self._condemned: set[int] = set()
        self._published = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, start: int, end: int, bytes_per_second: int) -> None:
        """Records in ``[start, end)`` are unchecked; walk them at ``bytes_per_second`` (0: no walk,
        reads check each record they serve from there)."""
        self.frontier, self.end = start, end
        if start >= end:
            self._finish()
            return
        self._publish()
        logger.info("body CRC check of the CommitLog's [%d, %d) started", start, end)
        if bytes_per_second > 0:
            self._thread = threading.Thread(
                target=self._walk, args=(bytes_per_second,), name="sparkmq-body-verify", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()

    # -- reads (store lock held) -----------------------------------------------------------
    @property
    def quiet(self) -> bool:
        """Whether reads have nothing to check: the walk is done and no record failed."""
        return self.done.is_set() and not self._condemned

    def pending(self, low: int, high: int) -> bool:
        """Whether any byte of ``[low, high)`` lies in the range not yet walked."""
        return low < self.end and high > self.frontier and not self.done.is_set()

    def units_pending(self, queue: ConsumeQueue, offset: int, count: int) -> bool:
        """Whether a record named by the ``count`` units from ``offset`` may lie in the range not
        yet walked (blank units aside; a damaged unit's wild values say yes)."""
        if self.done.is_set():
            return False
        units = queue.read_units(offset, count)
        units = units[units["size"] != BLANK_UNIT_SIZE]
        if len(units) == 0:
            return False
        physical = units["offset"].astype(np.int64)
        return self.pending(int(physical.min()), int((physical + units["size"]).max()))

    def check_read(self, physical: int, size: int) -> bool:
        """Check the record at ``physical`` a read is about to serve (once); False when it failed its
        CRC (reported now or before)."""
        if physical in self._condemned:
            return False
        if not self.pending(physical, physical + size) or physical in self._checked:
            return True
        record = self.commitlog.read(physical, size)
        if record is None:
            return True  # gone: the read finds it removed
        if body_intact(record):
            if len(self._checked) < MAX_FIRST_READ_CHECKS:
                self._checked.add(physical)
            return True
        self._condemn(physical, size, record[:28], "a read")
        return False

    def check_taken(self, queue: ConsumeQueue, queue_offsets: list[int], physical: list[int], sizes: list[int]) -> bool:
        """``check_read`` of every record a read of ``queue`` took; False when any failed, its unit
        blanked (the read is done again)."""
        intact = True
        for queue_offset, at, size in zip(queue_offsets, physical, sizes, strict=True):
            if not self.check_read(at, size):
                queue.blank_unit_of(queue_offset, at, size)  # a no-op when its head named it already
                intact = False
        return intact

    def _condemn(self, physical: int, size: int, head: bytes | None, by: str) -> None:
        self._condemned.add(physical)
        self._lost(physical, size, head, f"the record of {size} bytes fails its body CRC (found by {by})")

    def _lost(self, physical: int, size: int, head: bytes | None, detail: str) -> None:
        """Report the ``size`` bytes at ``physical`` lost, blanking the unit naming them (``head``'s)."""
        mapped = self.commitlog.queue.find(physical)
        where = f"{mapped.path} position {physical - mapped.start_offset}" if mapped else f"offset {physical}"
        if blank_units_naming(self.queues, head, physical, size):
            detail += "; its ConsumeQueue unit blanked"
        self.damage.found(COMMIT_LOG, "lost", where, detail)

    # -- the walk --------------------------------------------------------------------------
    def _walk(self, bytes_per_second: int) -> None:
        try:
            while not self._stop.is_set() and not self.done.is_set() and not self.halted.is_set():
                started = time.monotonic()
                walked = self.step()
                self._stop.wait(max(walked / bytes_per_second - (time.monotonic() - started), 0.0))
        except Exception:  # the walk stops; reads keep checking what it did not reach
            logger.exception("the body CRC check stopped at %d of [.., %d)", self.frontier, self.end)

    def step(self) -> int:
        """Check the next chunk of the range; returns how many bytes the frontier moved (0 when the
        walk is done or halted)."""
        with self.lock:
            at = max(self.frontier, self.commitlog.min_offset)
            mapped = self.commitlog.queue.find(at) if at < self.end else None
            if mapped is None:
                self._finish()
                return 0
            if self.halted.is_set():
                return 0
            pos = at - mapped.start_offset
            limit = min(mapped.write_position, self.end - mapped.start_offset)
            base, next_segment = mapped.start_offset, min(mapped.end_offset, self.end)
            try:
                chunk = _read_chunk(mapped.path, pos, limit - pos)
            except OSError as exc:
                self.damage.found(
                    COMMIT_LOG,
                    "unreadable",
                    f"{mapped.path} position {pos}",
                    f"{exc}; the body CRC check stops at {at}, reads check the records after it",
                )
                self.halted.set()
                return 0
        walked, failed, bad_at = _walk_chunk(chunk, at)
        with self.lock:
            for physical, size, head in failed:
                if physical not in self._checked and self.commitlog.queue.find(physical) is not None:
                    self._condemn(physical, size, head, "the background check")
            moved = at + walked
            if bad_at is not None:
                moved = self._resync(bad_at, next_segment)
            elif walked == 0 or base + limit <= moved:  # a filler, what was written, or the range ends
                moved = next_segment
            self._advance(moved)
            return moved - at

    def _resync(self, physical: int, next_segment: int) -> int:
        """Bytes at ``physical`` hold no valid record: skip (and report) them to the next intact one."""
        records = self.commitlog.scan(physical, True, Resync(2**63 - 1, self._skipped))
        try:
            record = next(records, None)
        finally:
            records.close()
        if record is not None:
            return record.physical_offset
        self.damage.found(COMMIT_LOG, "lost", f"offset {physical}", "no valid record up to its segment's end")
        return next_segment

    def _skipped(self, physical: int, count: int, damaged: ScannedRecord | None) -> None:
        if damaged is not None:
            self._condemn(physical, count, self.commitlog.read(physical, 28), "the background check")
            return
        self._lost(physical, count, self.commitlog.read(physical, 28), f"{count} bytes hold no valid record")

    def _advance(self, frontier: int) -> None:
        self.frontier = frontier
        if frontier >= self.end:
            self._finish()
        elif frontier - self._published >= MARKER_STEP_BYTES:
            self._publish()

    def _publish(self) -> None:
        """Write ``[frontier, end)`` to ``UNVERIFIED_FILE`` (atomically: readers never see half)."""
        temporary = self.marker.with_suffix(".tmp")
        try:
            temporary.write_text(f"{self.frontier} {self.end}\n")
            os.replace(temporary, self.marker)
        except OSError as exc:  # the store still serves; only local reads lose their guard
            logger.warning("cannot write %s (local reads may read unchecked records): %s", self.marker, exc)
        self._published = self.frontier

    def _finish(self) -> None:
        self.frontier = self.end
        self._checked.clear()
        try:
            self.marker.unlink(missing_ok=True)
        except OSError as exc:
            logger.warning("cannot remove %s (local reads pull what it names): %s", self.marker, exc)
        if not self.done.is_set():
            logger.info("body CRC check done: %d records condemned", len(self._condemned))
        self.done.set()


def _read_chunk(path: Path, pos: int, written: int) -> bytes:
    """The next chunk of a segment from ``pos`` (``written`` bytes are there): ``CHUNK_BYTES``, or the
    whole record there when it is larger. Raises OSError when a read fails or the file ends early."""
    fd = os.open(path, os.O_RDONLY)
    try:
        want = min(written, CHUNK_BYTES)
        chunk = disk.pread(fd, want, pos)
        size = _INT32.unpack_from(chunk)[0] if len(chunk) >= 4 else 0
        if want < size <= written:  # a record larger than a chunk is walked whole
            want = size
            chunk = disk.pread(fd, want, pos)
    finally:
        os.close(fd)
    if len(chunk) < want:
        raise OSError(f"the file ends at {pos + len(chunk)}, before its {pos + want} written bytes")
    return chunk


def _walk_chunk(chunk: bytes, start: int) -> tuple[int, list[tuple[int, int, bytes]], int | None]:
    """Walk the records of ``chunk`` (CommitLog bytes from ``start``): how many bytes hold whole
    records that were checked, the (offset, size, head) of those failing their CRC, and the offset
    of bytes that hold no valid record (None when the walk ended at the chunk's end or a filler).

    A record is valid as ``check_record`` has it (magic, size, its own offset, lengths that fill its
    size), checked without decoding it: the walk costs little more than the CRC of each body."""
    view = memoryview(chunk)
    end = len(chunk)
    pos, failed = 0, list[tuple[int, int, bytes]]()
    while pos + _HEAD.size <= end:
        size, magic, crc, _queue_id, _flag, _queue_offset, physical = _HEAD.unpack_from(chunk, pos)
        if magic == L.BLANK_MAGIC_CODE:
            break
        if size < L.RECORD_FIXED_BYTES or magic != L.MESSAGE_MAGIC_CODE or physical != start + pos:
            return pos, failed, start + pos
        if pos + size > end:
            if pos:
                break  # continued by the next chunk (which begins with it)
            return pos, failed, start + pos
        if lengths_fault(view[pos : pos + size], physical) is not None:
            return pos, failed, start + pos
        body_len = _INT32.unpack_from(chunk, pos + L.POS_BODY_LENGTH)[0]
        if zlib.crc32(view[pos + L.POS_BODY : pos + L.POS_BODY + body_len]) & 0x7FFFFFFF != crc:
            failed.append((physical, size, bytes(chunk[pos : pos + 28])))
        pos += size
    return pos, failed, None
