"""Start-up recovery: make CommitLog, ConsumeQueues and IndexFiles consistent again.

Normal exit (no ``abort`` marker): walk the last three CommitLog segments to find the end,
then let the catch-up dispatch fill whatever the ConsumeQueues or index lack.
Abnormal exit: walk from the newest segment that the checkpoint proves safe, checking
magic, size, position and body CRC, dispatching every valid record; cut the torn tail and
drop ConsumeQueue / index entries beyond it (``DefaultMessageStore.recover``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sparkmq.store.checkpoint import StoreCheckpoint
from sparkmq.store.commitlog import CommitLog
from sparkmq.store.consume_queue import ConsumeQueue
from sparkmq.store.dispatch import TagsCoder, requests_for_scan
from sparkmq.store.index_service import IndexService

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What recovery found: the valid end of the log and how much it replayed."""

    last_exit_ok: bool
    process_offset: int
    torn_tail: bool
    dispatched_from: int


class Recovery:
    """Runs recovery over already-loaded store parts; ``apply`` dispatches requests."""

    def __init__(self, commitlog: CommitLog, queues: list[ConsumeQueue], index: IndexService,
                 checkpoint: StoreCheckpoint, coder: TagsCoder, check_crc: bool) -> None:
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.checkpoint = checkpoint
        self.coder = coder
        self.check_crc = check_crc

    def run(self, last_exit_ok: bool, index_rebuild_from: int | None, dispatch: object) -> RecoveryReport:
        """Recover; ``dispatch`` is the store's ``_dispatch(request)`` callable."""
        max_cq_physical = max((q.recover() for q in self.queues), default=-1)
        files = self.commitlog.queue.files
        if not files:
            for queue in self.queues:
                queue.destroy()
            return RecoveryReport(last_exit_ok, 0, False, 0)
        if last_exit_ok:
            start = files[max(len(files) - 3, 0)].start_offset
            for _record in self.commitlog.scan(start, self.check_crc):
                pass
            dispatched_from = -1
        else:
            start = self._safe_start()
            if index_rebuild_from is not None:
                start = min(start, self._file_start_at_or_before(index_rebuild_from))
            for request in requests_for_scan(self.coder, self.commitlog.scan(start, self.check_crc)):
                dispatch(request)  # type: ignore[operator]
            dispatched_from = start
        process_offset = self.commitlog.scan_end
        torn_tail = self._has_bytes_at(process_offset)
        if torn_tail:
            logger.warning("recovery cut the CommitLog at %d: the bytes after it are no valid record", process_offset)
        self.commitlog.queue.truncate_dirty(process_offset)
        if max_cq_physical >= process_offset or not last_exit_ok:
            for queue in self.queues:
                queue.truncate_after_physical(process_offset)
            self.index.truncate_after(process_offset)
        return RecoveryReport(last_exit_ok, process_offset, torn_tail, dispatched_from)

    def _safe_start(self) -> int:
        """Start of the newest segment whose first record is older than the checkpoint's safe time."""
        safe_time = self.checkpoint.min_timestamp()
        for mapped in reversed(self.commitlog.queue.files):
            first = self.commitlog.first_store_timestamp(mapped)
            if first and first <= safe_time:
                return mapped.start_offset
        return self.commitlog.queue.files[0].start_offset

    def _file_start_at_or_before(self, offset: int) -> int:
        mapped = self.commitlog.queue.find(offset)
        return mapped.start_offset if mapped else self.commitlog.queue.files[0].start_offset

    def _has_bytes_at(self, offset: int) -> bool:
        mapped = self.commitlog.queue.find(offset)
        if mapped is None or offset - mapped.start_offset + 8 > mapped.file_bytes:
            return False
        return any(mapped.read(offset - mapped.start_offset, 8))
