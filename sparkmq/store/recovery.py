"""Start-up recovery: make CommitLog, ConsumeQueues and IndexFiles consistent again.

The work is bounded by the tail, not by what is stored:

* Normal exit, or a crash of the process alone (the ``abort`` marker names this boot, so
  the page cache, and with it every byte the process wrote, survived): the newest record a
  ConsumeQueue points at is checked (CRC, and that it matches its unit). Every record before
  it was written before it, so the scan starts there: it re-dispatches what follows and
  stops at the first invalid record (a torn put).
* Otherwise (a crash of the machine, or no usable anchor): RocketMQ's way. After a normal
  exit from the third-last segment; after a crash from the newest segment the checkpoint
  proves safe (``recoverAbnormally``), checking magic, size, position and body CRC.

Either way the torn tail is cut and ConsumeQueue / index entries beyond it are dropped.

Bytes that hold no valid record do not end the log when an intact record follows them: the scan
resynchronises on the next record proven intact (its magic, its own offset in its head, its sizes
and its body CRC: a false match needs all of them) that was stored before what the checkpoint says
was flushed (after a clean exit: anywhere). A torn put can leave a later record of its batch whole
after an earlier one torn (memcpy does not store in order), and such a record was never
acknowledged: stopping there, as RocketMQ does, is right for it. Damage below the flushed point is
the disk's, and the intact records after it were acknowledged: they are kept, and what was skipped
is reported (a record whose body fails its CRC has its ConsumeQueue unit blanked, so consumers move
past it).
What start-up finds missing (a lost ConsumeQueue file or directory, lost index files) is
rebuilt from the CommitLog before this runs (``lost_queue_start``, ``startup.load_queues``).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sparkmq.store.body_verify import blank_units_naming
from sparkmq.store.checkpoint import StoreCheckpoint
from sparkmq.store.commitlog import CommitLog, Resync, ScannedRecord
from sparkmq.store.consume_queue import UNIT_BYTES, ConsumeQueue
from sparkmq.store.damage import COMMIT_LOG, DamageReport
from sparkmq.store.disk import store_io
from sparkmq.store.dispatch import DispatchRequest, TagsCoder, requests_for_scan
from sparkmq.store.index_service import IndexService

logger = logging.getLogger(__name__)
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
_ZERO_SCAN_CHUNK = 8 * 1024 * 1024
ANCHOR_CANDIDATES = 16  # queue tails tried, newest first, before falling back to a segment scan


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What recovery found: the valid end of the log and where its replay started.

    ``anchored``: the replay started at the newest intact record (the bounded path).
    """

    last_exit_ok: bool
    process_offset: int
    torn_tail: bool
    dispatched_from: int
    anchored: bool = False


def boot_id() -> str:
    """This boot's id (Linux); '' where there is none, which makes every crash a machine crash."""
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


def read_abort_marker(path: Path) -> str:
    """The boot id the abort marker names ('' if none)."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def write_abort_marker(path: Path, boot: str) -> None:
    """Create the marker naming ``boot``, synced with its directory entry: a marker lost to a
    power cut would make the next start take the crash for a clean exit and trust the tail."""
    with store_io(f"writing the abort marker {path}"):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, boot.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def lost_queue_start(queue: ConsumeQueue, commitlog_min: int) -> int | None:
    """The CommitLog offset to replay from to rebuild what ``queue`` lost, None if nothing is.

    Cheap tests, no scan: no files at all; a full last file (the next one is created as
    soon as one fills, so it was lost); a first file that starts past 0 with a real unit
    whose record is still in the CommitLog, which retention never leaves behind (it deletes
    a file only once the records of its units are gone). A queue lost at its front is
    emptied here, as it cannot grow back at its front.
    """
    files = queue.files.files
    if not files:
        return commitlog_min
    if files[-1].is_full:
        return queue.max_physical_offset if queue.max_physical_offset >= 0 else commitlog_min
    first = queue.first_real_unit()
    at_file_start = queue.min_offset * UNIT_BYTES == files[0].start_offset
    if (
        files[0].start_offset > 0
        and first is not None
        and first[0] == queue.min_offset
        and at_file_start
        and (commitlog_min == 0 or first[1] > commitlog_min)
    ):
        logger.warning(
            "ConsumeQueue %s/%d starts at %d but the CommitLog holds older records: rebuilt",
            queue.topic,
            queue.queue_id,
            queue.min_offset,
        )
        queue.files.destroy()
        queue.min_logic_offset, queue.max_physical_offset = 0, -1
        return commitlog_min
    return None


class Recovery:
    """Runs recovery over already-loaded store parts; ``dispatch`` applies requests."""

    def __init__(
        self,
        commitlog: CommitLog,
        queues: Mapping[tuple[str, int], ConsumeQueue],
        index: IndexService,
        checkpoint: StoreCheckpoint,
        coder: TagsCoder,
        check_crc: bool,
        damage: DamageReport,
    ) -> None:
        self.damage = damage
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.checkpoint = checkpoint
        self.coder = coder
        self.check_crc = check_crc
        self._reported: set[int] = set()

    def start(self, last_exit_ok: bool, page_cache_intact: bool) -> tuple[int, bool] | None:
        """Where ``run``'s scan starts, and whether that is an anchor (None: no CommitLog). Every byte
        before it was written before a later record known intact, or flushed (``page_cache_intact``:
        only the process died)."""
        files = self.commitlog.queue.files
        if not files:
            return None
        anchor = self._anchor() if last_exit_ok or page_cache_intact else None
        if anchor is not None:
            return anchor, True
        if last_exit_ok:
            return files[max(len(files) - 3, 0)].start_offset, False
        return self._safe_start(), False

    def run(
        self, last_exit_ok: bool, begin: tuple[int, bool] | None, dispatch: Callable[[DispatchRequest], None]
    ) -> RecoveryReport:
        """Recover (ConsumeQueues already ``recover``-ed) from ``begin`` (``start``'s answer)."""
        if begin is None:
            for queue in list(self.queues.values()):
                queue.destroy()
            return RecoveryReport(last_exit_ok, 0, False, 0)
        start, anchored = begin
        if anchored:
            for queue in list(self.queues.values()):
                queue.truncate_after_physical(start)  # the anchor record and what follows are dispatched again
        records = self.commitlog.scan(start, self.check_crc, self.resync(last_exit_ok))
        for request in requests_for_scan(self.coder, records):
            dispatch(request)
        process_offset = self.commitlog.scan_end
        torn_tail = self._has_bytes_at(process_offset)
        if torn_tail:
            logger.warning("recovery cut the CommitLog at %d: the bytes after it are no valid record", process_offset)
        # After any crash, zero what follows the end even when its first bytes are zero: a copy
        # cut short by a kill need not have reached the memory in order (memcpy stores the last
        # vector of a run early), so a record's head may be zero while bytes after it are not.
        self._cut(process_offset, zero_after=torn_tail or not last_exit_ok)
        for queue in list(self.queues.values()):
            queue.truncate_after_physical(process_offset)
        self.index.truncate_after(process_offset)
        return RecoveryReport(last_exit_ok, process_offset, torn_tail, start, anchored)

    def resync(self, settled: bool) -> Resync:
        """How start-up's scans go on past damage: to records stored before what the checkpoint says
        was flushed; anywhere when every byte scanned is ``settled`` (after a clean exit, or below
        ``start``)."""
        return Resync(2**63 - 1 if settled else self.checkpoint.physic_msg_timestamp, self._skipped)

    def _skipped(self, physical: int, count: int, damaged: ScannedRecord | None) -> None:
        """Report bytes a scan skipped (``Resync``), once however many scans meet them. When they are
        one record whose head still names its queue (queue id, queue offset, total size), the unit
        naming that record is blanked, so reads move past it."""
        if physical in self._reported:
            return
        self._reported.add(physical)
        mapped = self.commitlog.queue.find(physical)
        assert mapped is not None  # the scan is reading it
        where = f"{mapped.path} position {physical - mapped.start_offset}"
        detail = f"{count} bytes hold no valid record"
        if damaged is not None:
            name = f"{damaged.topic}/{damaged.queue_id} queue offset {damaged.queue_offset}"
            detail = f"the record of {name} fails its body CRC"
        if blank_units_naming(self.queues, self.commitlog.read(physical, 28), physical, count):
            detail += "; its ConsumeQueue unit blanked"
        self.damage.found(COMMIT_LOG, "skipped", where, detail + "; the scan goes on at the next intact record")

    def _anchor(self) -> int | None:
        """Start of the newest record some ConsumeQueue's last unit points at, if it is intact."""
        tails = []
        for queue in self.queues.values():
            unit = queue.last_unit()
            if unit is not None and int(unit["size"]) > 0:
                tails.append((int(unit["offset"]) + int(unit["size"]), queue, unit))
        tails.sort(key=lambda tail: tail[0], reverse=True)
        for _end, queue, unit in tails[:ANCHOR_CANDIDATES]:
            if self._unit_matches_record(queue, int(unit["offset"]), int(unit["size"]), int(unit["tags_code"])):
                return int(unit["offset"])
        return None

    def _unit_matches_record(self, queue: ConsumeQueue, offset: int, size: int, tags_code: int) -> bool:
        records = self.commitlog.scan(offset, check_crc=True)
        try:
            record = next(iter(records), None)
        finally:
            records.close()
        if record is None or record.physical_offset != offset:
            return False
        requests = list(requests_for_scan(self.coder, [record]))
        return (
            (record.size, record.topic, record.queue_id, record.queue_offset)
            == (size, queue.topic, queue.queue_id, queue.max_offset - 1)
            and len(requests) == 1
            and int(requests[0].tags_codes[0]) == tags_code
        )

    def _cut(self, offset: int, zero_after: bool) -> None:
        """Make ``offset`` the write position; zero what follows only when it may hold bytes."""
        log = self.commitlog.queue
        mapped = log.find(offset)
        if mapped is None or mapped is not log.files[-1]:
            log.truncate_dirty(offset)  # later segments go too
            return
        pos = offset - mapped.start_offset
        end = _data_end(mapped.path, pos) if zero_after else pos
        if end > pos:  # the head last: a crash midway leaves it, and the next start zeroes again
            head = min(end - pos, 8)
            mapped.write_position = mapped.flushed_position = pos + head
            mapped.append(bytes(end - pos - head))
            mapped.flush()
            mapped.write_position = mapped.flushed_position = pos
            mapped.append(bytes(head))
            mapped.flush()
        mapped.write_position = mapped.flushed_position = pos

    def _safe_start(self) -> int:
        """Start of the newest segment whose first record is older than the checkpoint's safe time."""
        safe_time = self.checkpoint.min_timestamp()
        for mapped in reversed(self.commitlog.queue.files):
            first = self.commitlog.first_store_timestamp(mapped)
            if first and first <= safe_time:
                return mapped.start_offset
        return self.commitlog.queue.files[0].start_offset

    def _has_bytes_at(self, offset: int) -> bool:
        mapped = self.commitlog.queue.find(offset)
        if mapped is None or offset - mapped.start_offset + 8 > mapped.file_bytes:
            return False
        return any(mapped.read(offset - mapped.start_offset, 8))


def _data_end(path: Path, pos: int) -> int:
    """End of the last non-zero byte after ``pos`` in the file (``pos`` if there is none).

    Only the file's data extents are read (``SEEK_DATA`` / ``SEEK_HOLE``), with ``pread``:
    the unwritten rest of a 1 GiB segment costs nothing, where reading it (through the
    mapping or not) takes seconds.
    """
    end = pos
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        at = pos
        while at < size:
            try:
                data_at = os.lseek(fd, at, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data after ``at``
                    break
                raise
            hole_at = min(os.lseek(fd, data_at, os.SEEK_HOLE), size)
            for chunk_at in range(data_at, hole_at, _ZERO_SCAN_CHUNK):
                chunk = np.frombuffer(os.pread(fd, min(_ZERO_SCAN_CHUNK, hole_at - chunk_at), chunk_at), dtype=np.uint8)
                if chunk.any():
                    end = chunk_at + len(chunk) - int(np.argmax(chunk[::-1] != 0))
            at = hole_at
    finally:
        os.close(fd)
    return end
