"""Retention: delete expired CommitLog segments, then the ConsumeQueue and index files below them."""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
    """``CleanCommitLogService`` + ``CleanConsumeQueueService`` for one store."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store

    def disk_used_ratio(self) -> float:
        usage = shutil.disk_usage(self.store.config.commitlog_dir)
        return usage.used / usage.total if usage.total else 0.0

    def run(self, now: float | None = None, force: bool = False) -> RetentionReport:
        """One cleaning pass: at a ``deleteWhen`` hour delete segments older than
        ``fileReservedTime``; above ``diskMaxUsedSpaceRatio`` (or with ``force``) delete at once.
        The newest segment is never deleted."""
        cfg = self.store.config
        moment = time.time() if now is None else now
        time_trigger = time.localtime(moment).tm_hour in cfg.delete_hours()
        space_trigger = self.disk_used_ratio() > cfg.disk_max_used_space_ratio
        if not (time_trigger or space_trigger or force):
            return RetentionReport(0, False, False)
        store = self.store
        with store._lock, store._flush_lock:  # noqa: SLF001 - retention is part of the store
            deleted = store.commitlog.queue.delete_expired_by_time(
                cfg.file_reserved_time_hours * 3600, force=space_trigger or force, max_files=DELETE_FILES_BATCH_MAX
            )
            if deleted:
                cl_min = store.commitlog.min_offset
                for queue in store._queues.values():  # noqa: SLF001
                    queue.delete_expired(cl_min)
                store.index.delete_below(cl_min)
                logger.info("retention deleted %d CommitLog segments; minimum offset now %d", deleted, cl_min)
        return RetentionReport(deleted, time_trigger, space_trigger)
