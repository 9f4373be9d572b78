"""A store's start-up steps before and after recovery (``MessageStore.start`` runs them in order).

The directory lock; loading the ConsumeQueues (those the manifest lists but lost included) and
the index files, each saying where the CommitLog must be dispatched again to rebuild what is
missing; that replay; after recovery, the queue table (minimum and next offset per queue);
and the flush and clean services. Recovery itself (the torn tail) is :mod:`sparkmq.store.recovery`.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
from collections.abc import Callable

from sparkmq.errors import StoreIOError, StoreLockedError
from sparkmq.store.checkpoint import StoreCheckpoint
from sparkmq.store.commitlog import CommitLog, Resync
from sparkmq.store.config import FlushDiskType, StoreConfig
from sparkmq.store.consume_queue import ConsumeQueue
from sparkmq.store.damage import INDEX_FILE, DamageReport
from sparkmq.store.disk import store_io
from sparkmq.store.dispatch import DispatchRequest, TagsCoder, requests_for_scan
from sparkmq.store.flush import GroupCommitService, PeriodicService, StoreFlush
from sparkmq.store.index_service import IndexService
from sparkmq.store.mapped_file import MapPool
from sparkmq.store.queue_manifest import QueueManifest
from sparkmq.store.recovery import lost_queue_start
from sparkmq.store.retention import Retention

logger = logging.getLogger(__name__)
QueueTable = dict[tuple[str, int], ConsumeQueue]


def acquire_lock(config: StoreConfig) -> int:
    """Lock the store directory for this process; return the lock file's descriptor.

    Raises :class:`StoreLockedError` while another process holds it.
    """
    with store_io(f"opening the lock file {config.lock_path}"):
        fd = os.open(config.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise StoreLockedError(f"store {config.root_dir} is in use by another process") from exc
    try:
        with store_io(f"writing the lock file {config.lock_path}"):
            os.write(fd, b"lock")
    except StoreIOError:
        os.close(fd)
        raise
    return fd


def load_queues(
    config: StoreConfig,
    commitlog: CommitLog,
    manifest: QueueManifest,
    map_pool: MapPool,
    queues: QueueTable,
    zero_tails: bool,
) -> int | None:
    """Load and ``recover`` every ConsumeQueue into ``queues``, those listed in the manifest but
    lost included (``zero_tails``: after a machine crash, zero whatever follows each queue's valid end).

    Returns the CommitLog offset to replay from to rebuild what is missing (None: nothing).
    """
    root = config.consume_queue_dir
    keys = manifest.load()
    if root.exists():
        keys.update(
            (topic_dir.name, int(queue_dir.name))
            for topic_dir in root.iterdir()
            if topic_dir.is_dir()
            for queue_dir in topic_dir.iterdir()
            if queue_dir.is_dir() and queue_dir.name.isdigit()
        )
    cl_min = commitlog.min_offset
    starts: list[int | None] = [cl_min] if not keys and commitlog.max_offset > cl_min else []  # every queue lost
    for topic, queue_id in sorted(keys):
        queue = ConsumeQueue(topic, queue_id, root, config.consume_queue_units_per_file, map_pool)
        if queue.load():
            queue.recover(zero_tails)
        queues[(topic, queue_id)] = queue
        starts.append(lost_queue_start(queue, cl_min))
    return min((start for start in starts if start is not None), default=None)


def load_index(
    index: IndexService, checkpoint: StoreCheckpoint, commitlog: CommitLog, trusted: bool, damage: DamageReport
) -> int | None:
    """Load index files; return the CommitLog offset to replay from to complete them (None: nothing).

    After a machine crash the unfinished files (newer than the checkpoint's index time) go, and so
    do a file whose header is damaged and the newer ones (reported to ``damage``).
    With no file left, the index is rebuilt from the CommitLog's start if it ever had one.
    """
    index.load()
    untrusted = [] if trusted else [f for f in index.files if f.end_timestamp > checkpoint.index_msg_timestamp]
    for index_file in untrusted:
        index.files.remove(index_file)
        index_file.destroy()
    rebuilt = False
    for found in [d for d in index.damaged if d.index in index.files][:1]:  # the newer files go with it
        damage.found(INDEX_FILE, "rebuilt", f"{found.index.path} position {found.position}", found.detail)
        index.drop_from(found.index)
        rebuilt = True
    index.damaged.clear()
    if index.files:
        return index.end_phy_offset
    if untrusted or rebuilt or checkpoint.index_msg_timestamp > 0:
        return commitlog.min_offset
    return None


def replay(
    config: StoreConfig,
    commitlog: CommitLog,
    coder: TagsCoder,
    dispatch: Callable[[DispatchRequest], None],
    start: int,
    stop: int,
    resync: Resync,
) -> int:
    """Dispatch the CommitLog from ``start`` up to ``stop`` (recovery's start: it dispatches the rest)
    again (idempotent: what is held is skipped), going on past damaged records (``resync``: every
    byte below ``stop`` was written before a record known intact, so no torn put lies there); returns
    where the scan ended."""
    start = max(start, commitlog.min_offset)
    logger.info(
        "store %s: dispatching the CommitLog again from %d (what ConsumeQueues or the index lack)",
        config.root_dir,
        start,
    )
    records = commitlog.scan(start, config.check_crc_on_recover, resync)
    try:
        for request in requests_for_scan(coder, itertools.takewhile(lambda r: r.physical_offset < stop, records)):
            dispatch(request)
    finally:
        records.close()
    return max(stop, start) if commitlog.scan_end >= stop else commitlog.scan_end


def recover_queue_table(
    commitlog: CommitLog, queues: QueueTable, next_queue_offset: dict[tuple[str, int], int], manifest: QueueManifest
) -> None:
    """Minimum and next offset per queue; drop queues left without files; sync the manifest."""
    cl_min = commitlog.min_offset
    for key, queue in list(queues.items()):
        if not queue.files.files:
            queue.destroy()
            del queues[key]
            continue
        if queue.files.files[-1].is_full:
            queue.files.last_file()  # see ConsumeQueue._write: a full last file means a lost one
        queue.correct_min_offset(cl_min)
        next_queue_offset[key] = queue.max_offset
    manifest.rewrite(queues)


def start_services(
    config: StoreConfig, flusher: StoreFlush, retention: Retention
) -> tuple[GroupCommitService | None, list[PeriodicService]]:
    """Start the flush (group commit with SYNC flush) and clean services; return them to stop on close."""
    retention.check_disk_space()
    group_commit = None
    services = []
    if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
        group_commit = GroupCommitService(flusher.flush_commitlog)
        group_commit.start()
    else:
        services.append(
            PeriodicService(
                flusher.flush_commitlog_if_due,
                config.flush_interval_commitlog_ms / 1000,
                "sparkmq-flush-commitlog",
            )
        )
    if config.transient_store_pool_enable:
        services.append(
            PeriodicService(
                flusher.commit_commitlog_if_due,
                config.commit_interval_commitlog_ms / 1000,
                "sparkmq-commit-commitlog",
            )
        )
    services.append(
        PeriodicService(
            flusher.flush_indexes_if_due,
            config.flush_interval_consume_queue_ms / 1000,
            "sparkmq-flush-consumequeue",
        )
    )
    services.append(PeriodicService(retention.run, config.clean_resource_interval_ms / 1000, "sparkmq-clean"))
    for service in services:
        service.start()
    return group_commit, services
