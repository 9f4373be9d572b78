"""Retention: delete expired CommitLog segments, then the ConsumeQueue and index files below them.

Also the disk-space guard of ``CleanCommitLogService.isSpaceToDelete``: above
``diskSpaceWarningLevelRatio`` the store refuses writes until usage falls back to
``diskSpaceCleanForciblyRatio`` or below.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkmq.store.disk import store_io

if TYPE_CHECKING:
    from sparkmq.store.index_file import IndexFile
    from sparkmq.store.mapped_file_queue import MappedFileQueue
    from sparkmq.store.message_store import MessageStore

logger = logging.getLogger(__name__)
DELETE_FILES_BATCH_MAX = 10  # DELETE_FILES_BATCH_MAX: segments per run


@dataclass(frozen=True, slots=True)
class RetentionReport:
    """What one cleaning run did and why."""

    deleted_segments: int
    time_trigger: bool
    space_trigger: bool


class Retention:
    """``CleanCommitLogService`` + ``CleanConsumeQueueService`` for one store.

    ``write_refusal`` is None while writes are allowed, else the remark a refused put gets.
    ``keep_from`` (set by the broker's table writer) returns the lowest CommitLog offset something
    derived from the log still needs, or None: no segment holding it or anything later is deleted,
    whatever its age or the disk pressure; ``held_segments`` counts the segments the last run kept so.
    """

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.write_refusal: str | None = None
        self.keep_from: Callable[[], int | None] | None = None
        self.held_segments = 0
        self._clean_immediately = False

    def disk_used_ratio(self) -> float:
        """The fuller of the CommitLog's and the ConsumeQueues' filesystems (used / total)."""
        cfg = self.store.config
        ratios = []
        for directory in {cfg.commitlog_dir, cfg.root_dir}:
            with store_io(f"measuring the disk space of {directory}"):
                usage = shutil.disk_usage(directory if directory.exists() else cfg.root_dir)
            ratios.append(usage.used / usage.total if usage.total else 0.0)
        return max(ratios)

    def check_disk_space(self) -> float:
        """Update ``write_refusal`` from the disk usage now; return the used ratio."""
        cfg = self.store.config
        ratio = self.disk_used_ratio()
        self._clean_immediately = ratio > cfg.disk_space_clean_forcibly_ratio
        if ratio > cfg.disk_space_warning_level_ratio:
            if self.write_refusal is None:
                logger.error(
                    "disk %.1f%% used, above diskSpaceWarningLevelRatio %.0f%%: the store refuses writes",
                    ratio * 100,
                    cfg.disk_space_warning_level_ratio * 100,
                )
            self.write_refusal = (
                f"the broker's disk is full: {ratio:.1%} of {cfg.commitlog_dir} used, above diskSpaceWarningLevelRatio "
                f"{cfg.disk_space_warning_level_ratio:.0%}; "
                f"writes resume below {cfg.disk_space_clean_forcibly_ratio:.0%}"
            )
        elif not self._clean_immediately and self.write_refusal is not None:
            logger.warning("disk %.1f%% used: the store accepts writes again", ratio * 100)
            self.write_refusal = None
        return ratio

    def run(self, now: float | None = None, force: bool = False) -> RetentionReport:
        """One cleaning pass: at a ``deleteWhen`` hour, or above ``diskMaxUsedSpaceRatio``,
        delete segments older than ``fileReservedTime``; above ``diskSpaceCleanForciblyRatio``
        with ``cleanFileForciblyEnable`` (or with ``force``) delete them whatever their age.
        The newest segment is never deleted."""
        cfg = self.store.config
        moment = time.time() if now is None else now
        time_trigger = time.localtime(moment).tm_hour in cfg.delete_hours()
        space_trigger = self.check_disk_space() > cfg.disk_max_used_space_ratio
        if not (time_trigger or space_trigger or force):
            return RetentionReport(0, False, False)
        at_once = force or (self._clean_immediately and cfg.clean_file_forcibly_enable)
        deleted = self._delete(cfg.file_reserved_time_hours * 3600, at_once)
        return RetentionReport(deleted, time_trigger, space_trigger)

    def _report_held(
        self, commitlog: MappedFileQueue, reserved_seconds: float, at_once: bool, keep_from: int | None
    ) -> None:
        """Count (and log) the expired segments ``keep_from`` kept: disk pressure is reported, not resolved by loss."""
        held = 0
        if keep_from is not None:
            now = time.time()
            for mapped in commitlog.files[:-1]:
                if not at_once and mapped.last_modified() + reserved_seconds > now:
                    break
                held += mapped.end_offset > keep_from
        if held and held != self.held_segments:
            logger.warning(
                "retention keeps %d expired CommitLog segments from offset %d: a topic's table has not taken them yet",
                held,
                keep_from,
            )
        self.held_segments = held

    def _delete(self, reserved_seconds: float, at_once: bool) -> int:
        store = self.store
        # Under the store lock only list changes happen; the files are unmapped and unlinked
        # under the flush lock alone, so puts and reads never wait behind an fsync here.
        with store._lock:  # retention is part of the store
            commitlog = store.commitlog.queue
            keep_from = self.keep_from() if self.keep_from is not None else None
            deletable = DELETE_FILES_BATCH_MAX
            if keep_from is not None:
                deletable = min(deletable, sum(1 for mapped in commitlog.files if mapped.end_offset <= keep_from))
            deleted = commitlog.delete_expired_by_time(reserved_seconds, force=at_once, max_files=deletable)
            self._report_held(commitlog, reserved_seconds, at_once, keep_from)
            queues: list[MappedFileQueue] = [commitlog]
            index_files: list[IndexFile] = []
            if deleted:
                cl_min = store.commitlog.min_offset
                for queue in store._queues.values():
                    queue.delete_expired(cl_min)
                    queues.append(queue.files)
                index_files = store.index.detach_below(cl_min)
                logger.info("retention deleted %d CommitLog segments; minimum offset now %d", deleted, cl_min)
        with store.flusher.lock:  # a flush in progress may still use the retired files
            for files in queues:
                files.destroy_retired()
            for index in index_files:
                index.destroy()
        return deleted
