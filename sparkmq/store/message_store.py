"""MessageStore: the facade over CommitLog, ConsumeQueues, IndexFiles, flush and retention.

Example (small segments: a default CommitLog segment reserves 1 GiB of disk)::

    >>> import tempfile
    >>> from sparkmq.message.record import MessageBatch
    >>> with tempfile.TemporaryDirectory() as root:
    ...     config = StoreConfig(Path(root), commitlog_file_bytes=64 * 1024, index_hash_slots=16, index_entries=64)
    ...     with MessageStore(config) as store:
    ...         store.put_messages(MessageBatch("TopicTest", 0, [b"hi"], [b"TAGS\\x01A"])).status.name
    ...         store.get_messages("group", "TopicTest", 0, 0, 32).message_count
    'PUT_OK'
    1
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from sparkmq.errors import (
    DiskError,
    MessageError,
    PropertiesTooLargeError,
    SegmentAllocationError,
    StoreClosedError,
    StoreError,
    StoreIOError,
    StoreLockedError,
)
from sparkmq.message import layout as L
from sparkmq.message.record import (
    SMALL_BATCH_MAX,
    MessageBatch,
    StoredMessage,
    decode_record,
)
from sparkmq.store.checkpoint import StoreCheckpoint
from sparkmq.store.commitlog import CommitLog
from sparkmq.store.config import DEFAULT_MAX_TRANSFER_BYTES, FlushDiskType, StoreConfig, delay_level_millis
from sparkmq.store.consume_queue import BLANK_UNIT_SIZE, UNIT_BYTES, ConsumeQueue
from sparkmq.store.disk import store_io
from sparkmq.store.dispatch import (
    DispatchListener,
    DispatchRequest,
    GroupDispatch,
    GroupDispatchListener,
    TagsCoder,
    dispatch_for_group,
    request_for_put,
    requests_for_scan,
)
from sparkmq.store.flush import GroupCommitService, PeriodicService, StoreFlush, flush_outcome
from sparkmq.store.index_service import IndexService
from sparkmq.store.lane import EncodedGroup
from sparkmq.store.mapped_file import MapPool
from sparkmq.store.mapped_file_queue import MappedFileQueue
from sparkmq.store.queue_manifest import QueueManifest
from sparkmq.store.reads import FrameAnswer, RecordFilter, read_frame, read_queue
from sparkmq.store.recovery import (
    Recovery,
    RecoveryReport,
    boot_id,
    lost_queue_start,
    read_abort_marker,
    write_abort_marker,
)
from sparkmq.store.replica import append_run, read_run
from sparkmq.store.retention import Retention
from sparkmq.store.status import GetResult, PutMessageStatus, PutResult

logger = logging.getLogger(__name__)


class MessageStore:
    """The durable store: ``start()`` recovers, puts append + dispatch, ``close()`` flushes."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.commitlog = CommitLog(
            MappedFileQueue(config.commitlog_dir, config.commitlog_file_bytes, sync_by_fd=True), config.store_host
        )
        self.index = IndexService(config.index_dir, config.index_hash_slots, config.index_entries)
        self.checkpoint: StoreCheckpoint | None = None
        self.coder = TagsCoder(delay_level_millis(config.message_delay_level))
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._map_pool = MapPool(config.mapped_consume_queue_files())  # bounds the descriptors of thousands of queues
        self._manifest = QueueManifest(config.consume_queue_dir / "queues")
        self._next_queue_offset: dict[tuple[str, int], int] = {}
        self._listeners: list[GroupDispatchListener] = []
        self._lock = threading.RLock()  # appends, dispatch, deletion, reads of segment lists
        self._last_store_timestamp = 0
        self._last_dispatched_timestamp = 0
        self._lock_fd: int | None = None
        self._services: list[PeriodicService] = []
        self._group_commit: GroupCommitService | None = None
        self._replica_dispatched: int | None = None  # a slave: CommitLog offset dispatch has reached
        self.slave_mode = False  # BrokerRole.SLAVE: only append_replica writes (DefaultMessageStore.putMessage)
        self.retention = Retention(self)
        self.flusher = StoreFlush(self)
        self.running = False

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> RecoveryReport:
        """Lock the directory, load, recover, catch up dispatch, start the flush and clean services."""
        cfg = self.config
        with store_io(f"creating the store directory {cfg.root_dir}"):
            cfg.root_dir.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        last_exit_ok = not cfg.abort_path.exists()
        this_boot = boot_id()
        page_cache_intact = not last_exit_ok and bool(this_boot) and read_abort_marker(cfg.abort_path) == this_boot
        self.commitlog.queue.load()
        self.checkpoint = StoreCheckpoint(cfg.checkpoint_path)
        replay_from = self._load_queues(zero_tails=not (last_exit_ok or page_cache_intact))
        index_from = self._load_index(last_exit_ok or page_cache_intact)
        replay_from = min((offset for offset in (replay_from, index_from) if offset is not None), default=None)
        if replay_from is not None:
            self._replay(replay_from)
        recovery = Recovery(
            self.commitlog, self._queues, self.index, self.checkpoint, self.coder, cfg.check_crc_on_recover
        )
        report = recovery.run(last_exit_ok, page_cache_intact, self._dispatch)
        self._recover_queue_table()
        write_abort_marker(cfg.abort_path, this_boot)
        self._start_services()
        self.running = True
        logger.info("store %s started: %s", cfg.root_dir, report)
        return report

    def close(self) -> None:
        """Stop services, flush everything, persist the checkpoint, remove the abort marker."""
        if not self.running:
            self._release_lock()
            return
        self.running = False
        for service in self._services:
            service.stop()
        if self._group_commit is not None:
            self._group_commit.stop()
        with self._lock:
            if self.disk_error is None:
                try:
                    self.flush()
                except DiskError:
                    pass  # logged by the fail-stop; closing goes on and the abort marker stays
                else:
                    self._manifest.rewrite(self._queues)
            for queue in self._queues.values():
                queue.close()
            self.index.close()
            self.commitlog.queue.close()
            self.flusher.close_checkpoint()
        if self.disk_error is None:
            with store_io(f"removing the abort marker {self.config.abort_path}"):
                self.config.abort_path.unlink(missing_ok=True)
        else:
            logger.error(
                "store %s closed after a disk error; the abort marker stays so the next start recovers",
                self.config.root_dir,
            )
        self._release_lock()

    def __enter__(self) -> MessageStore:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _acquire_lock(self) -> None:
        with store_io(f"opening the lock file {self.config.lock_path}"):
            fd = os.open(self.config.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise StoreLockedError(f"store {self.config.root_dir} is in use by another process") from exc
        try:
            with store_io(f"writing the lock file {self.config.lock_path}"):
                os.write(fd, b"lock")
        except StoreIOError:
            os.close(fd)
            raise
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _load_queues(self, zero_tails: bool) -> int | None:
        """Load and ``recover`` every ConsumeQueue, those listed in the manifest but lost included
        (``zero_tails``: after a machine crash, zero whatever follows each queue's valid end).

        Returns the CommitLog offset to replay from to rebuild what is missing (None: nothing).
        """
        root = self.config.consume_queue_dir
        keys = self._manifest.load()
        if root.exists():
            keys.update(
                (topic_dir.name, int(queue_dir.name))
                for topic_dir in root.iterdir()
                if topic_dir.is_dir()
                for queue_dir in topic_dir.iterdir()
                if queue_dir.is_dir() and queue_dir.name.isdigit()
            )
        cl_min = self.commitlog.min_offset
        starts: list[int | None] = (
            [cl_min] if not keys and self.commitlog.max_offset > cl_min else []
        )  # every queue lost
        for topic, queue_id in sorted(keys):
            queue = ConsumeQueue(topic, queue_id, root, self.config.consume_queue_units_per_file, self._map_pool)
            if queue.load():
                queue.recover(zero_tails)
            self._queues[(topic, queue_id)] = queue
            starts.append(lost_queue_start(queue, cl_min))
        return min((start for start in starts if start is not None), default=None)

    def _load_index(self, trusted: bool) -> int | None:
        """Load index files; return the CommitLog offset to replay from to complete them (None: nothing).

        After a machine crash the unfinished files (newer than the checkpoint's index time) go.
        With no file left, the index is rebuilt from the CommitLog's start if it ever had one.
        """
        assert self.checkpoint is not None
        self.index.load()
        untrusted = (
            [] if trusted else [f for f in self.index.files if f.end_timestamp > self.checkpoint.index_msg_timestamp]
        )
        for index in untrusted:
            self.index.files.remove(index)
            index.destroy()
        if self.index.files:
            return self.index.end_phy_offset
        if untrusted or self.checkpoint.index_msg_timestamp > 0:
            return self.commitlog.min_offset
        return None

    def _replay(self, start: int) -> None:
        """Dispatch the CommitLog from ``start`` again (idempotent: what is held is skipped)."""
        start = max(start, self.commitlog.min_offset)
        logger.info(
            "store %s: dispatching the CommitLog again from %d (what ConsumeQueues or the index lack)",
            self.config.root_dir,
            start,
        )
        for request in requests_for_scan(self.coder, self.commitlog.scan(start, self.config.check_crc_on_recover)):
            self._dispatch(request)

    def _recover_queue_table(self) -> None:
        """Minimum and next offset per queue; drop queues left without files; sync the manifest."""
        cl_min = self.commitlog.min_offset
        for key, queue in list(self._queues.items()):
            if not queue.files.files:
                queue.destroy()
                del self._queues[key]
                continue
            if queue.files.files[-1].is_full:
                queue.files.last_file()  # see ConsumeQueue._write: a full last file means a lost one
            queue.correct_min_offset(cl_min)
            self._next_queue_offset[key] = queue.max_offset
        self._manifest.rewrite(self._queues)

    def _start_services(self) -> None:
        cfg = self.config
        self.retention.check_disk_space()
        if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self._group_commit = GroupCommitService(self.flusher.flush_commitlog)
            self._group_commit.start()
        else:
            self._services.append(
                PeriodicService(
                    self.flusher.flush_commitlog_if_due,
                    cfg.flush_interval_commitlog_ms / 1000,
                    "sparkmq-flush-commitlog",
                )
            )
        self._services.append(
            PeriodicService(
                self.flusher.flush_indexes_if_due,
                cfg.flush_interval_consume_queue_ms / 1000,
                "sparkmq-flush-consumequeue",
            )
        )
        self._services.append(
            PeriodicService(self.retention.run, cfg.clean_resource_interval_ms / 1000, "sparkmq-clean")
        )
        for service in self._services:
            service.start()

    # -- writes ----------------------------------------------------------------------------
    def submit_messages(self, batch: MessageBatch) -> tuple[PutResult, Future[int] | None]:
        """Append and dispatch ``batch``; return the result and, with SYNC flush, the flush future.

        The messages are readable at once. Acknowledge a SYNC-flush producer only after the
        future resolves (``put_messages`` waits for it, up to ``syncFlushTimeout``).
        """
        results, flushed = self.submit_group([batch])
        return results[0], flushed if results[0].ok else None

    def submit_group(self, batches: Sequence[MessageBatch]) -> tuple[list[PutResult], Future[int] | None]:
        """Append and dispatch several batches in order (a group put); one result per batch.

        The put-side twin of group commit: the single sends of one event-loop turn take one lock,
        one store timestamp, one copy into the CommitLog (when they fit its current segment),
        one ConsumeQueue write per queue, one index put, and share one flush future (with SYNC
        flush; it covers every PUT_OK batch of the group). A batch refused (too large, the
        store read-only) gets its own status and does not affect the others.
        """
        refusal = self._write_refusal()
        results: list[PutResult | None] = [self._refused(batch, refusal) for batch in batches]
        accepted = [i for i, result in enumerate(results) if result is None]
        end = -1
        if accepted:
            with self._lock:
                store_timestamp = max(int(time.time() * 1000), self._last_store_timestamp)
                group = [batches[i] for i in accepted]
                grouped = self._put_group_locked(group, store_timestamp) if len(group) > 1 else None
                if grouped is None:
                    grouped = [self._put_locked(batch, store_timestamp) for batch in group]
                for i, result in zip(accepted, grouped, strict=True):
                    results[i] = result
                    if result.ok:
                        end = max(end, int(result.physical_offsets[-1]) + int(result.sizes[-1]))
        flushed = self._group_commit.request(end) if self._group_commit is not None and end >= 0 else None
        return results, flushed  # type: ignore[return-value]  # every slot was filled above

    def _refused(self, batch: MessageBatch, refusal: str | None) -> PutResult | None:
        """The result of a batch refused before the lock (None: go on and store it)."""
        try:
            batch.check_sizes(self.config.max_message_bytes)
        except PropertiesTooLargeError as exc:
            return PutResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, exc.remark)
        except MessageError as exc:
            return PutResult(PutMessageStatus.MESSAGE_ILLEGAL, exc.remark)
        if refusal is not None:
            return PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, refusal)
        if len(batch) == 0:
            return PutResult(PutMessageStatus.MESSAGE_ILLEGAL, "empty batch")
        return None

    def _put_locked(self, batch: MessageBatch, store_timestamp: int) -> PutResult:
        """Append and dispatch one batch (under the store lock); a failure rolls it back."""
        key = (batch.topic, batch.queue_id)
        dispatched = L.transaction_type(batch.sys_flag) in (L.TRANSACTION_NOT_TYPE, L.TRANSACTION_COMMIT_TYPE)
        queue_offset = self._next_queue_offset.get(key, 0) if dispatched else 0
        start = self.commitlog.max_offset
        queue = self._queues.get(key)
        queue_end = queue.max_physical_offset if queue is not None else -1
        try:
            appended = self.commitlog.append(batch, queue_offset, store_timestamp)
            self._last_store_timestamp = store_timestamp
            if dispatched:
                self._next_queue_offset[key] = queue_offset + len(batch)
                self._dispatch(
                    request_for_put(
                        self.coder,
                        batch.topic,
                        batch.queue_id,
                        queue_offset,
                        batch.properties,
                        appended.physical_offsets,
                        appended.sizes,
                        store_timestamp,
                    )
                )
        except SegmentAllocationError as exc:
            self._roll_back(start, key if dispatched else None, queue_offset, queue_end)
            logger.error("put to %s/%d refused: %s", batch.topic, batch.queue_id, exc.remark)
            return PutResult(
                PutMessageStatus.CREATE_MAPEDFILE_FAILED,
                f"create mapped file failed, server is busy or broken: {exc.remark}",
            )
        except DiskError as exc:  # an index file's msync on its roll
            self.flusher.fail_stop(exc)
            self._roll_back(start, key if dispatched else None, queue_offset, queue_end)
            return PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, f"the message was not stored: {exc}")
        return PutResult(
            PutMessageStatus.PUT_OK,
            "",
            np.asarray(appended.physical_offsets, dtype=np.int64),
            np.asarray(appended.sizes, dtype=np.int64),
            queue_offset,
            store_timestamp,
            self.config.store_host,
        )

    def _put_group_locked(self, group: list[MessageBatch], store_timestamp: int) -> list[PutResult] | None:
        """The group put's one copy and one dispatch; None (nothing done) when it does not apply:
        a batch is not small, or the group does not fit the current CommitLog segment."""
        if any(len(batch) > SMALL_BATCH_MAX for batch in group):
            return None
        planned: dict[tuple[str, int], int] = {}
        queue_offsets = []
        for batch in group:
            key = (batch.topic, batch.queue_id)
            if L.transaction_type(batch.sys_flag) in (L.TRANSACTION_NOT_TYPE, L.TRANSACTION_COMMIT_TYPE):
                queue_offset = planned.get(key)
                if queue_offset is None:
                    queue_offset = self._next_queue_offset.get(key, 0)
                planned[key] = queue_offset + len(batch)
                queue_offsets.append(queue_offset)
            else:
                queue_offsets.append(-1)  # a half or rolled-back transaction message: not dispatched
        start = self.commitlog.max_offset
        try:
            physical = self.commitlog.append_group(group, [max(q, 0) for q in queue_offsets], store_timestamp)
        except SegmentAllocationError:
            return None  # batch by batch, each answered with the failure
        if physical is None:
            return None
        self._last_store_timestamp = store_timestamp
        saved = {key: self._next_queue_offset.get(key, 0) for key in planned}
        queue_ends = {key: queue.max_physical_offset if (queue := self._queues.get(key)) else -1 for key in planned}
        self._next_queue_offset.update(planned)
        appended = [
            (b.topic, b.queue_id, q, b.properties, p, b.size_list)
            for b, q, p in zip(group, queue_offsets, physical, strict=True)
            if q >= 0
        ]
        try:
            self._dispatch_group(dispatch_for_group(self.coder, appended, store_timestamp))
        except DiskError as exc:  # an index file's msync on its roll: the whole group is undone
            self.flusher.fail_stop(exc)
            for key, offset in saved.items():
                self._roll_back(start, key, offset, queue_ends[key])
            return [
                PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, f"the message was not stored: {exc}") for _ in group
            ]
        flat = np.array([p for offsets in physical for p in offsets], dtype=np.int64)
        sizes = np.array([s for batch in group for s in batch.size_list], dtype=np.int64)
        results, first, host = [], 0, self.config.store_host
        for batch, queue_offset in zip(group, queue_offsets, strict=True):
            stop = first + len(batch)
            results.append(
                PutResult(
                    PutMessageStatus.PUT_OK,
                    "",
                    flat[first:stop],
                    sizes[first:stop],
                    max(queue_offset, 0),
                    store_timestamp,
                    host,
                )
            )
            first = stop
        return results

    def put_lane_group(self, group: EncodedGroup) -> tuple[int, list[int], Future[int] | None] | None:
        """Append and dispatch a native lane's group of plain single sends, whose records come
        encoded (see :mod:`sparkmq.store.lane`); ``submit_group``'s twin for that shape.

        Returns ``(physical start, the keys' first queue offsets, the group's flush future with
        SYNC flush, else None)``, or None with nothing written when the group is not for this
        path: writes refused, or the records do not fit the current CommitLog segment. The caller
        then serves the same requests the usual way, which answers each of these cases.
        """
        # put_lane_groups for one group (a lone send's read), without the steps that join groups
        if self._write_refusal() is not None:
            return None
        with self._lock:
            files = self.commitlog.queue.files
            mapped = files[-1] if files else self.commitlog.queue.last_file()  # a full one: declined below
            if group.record_bytes + L.END_FILE_MIN_BLANK_LENGTH > mapped.file_bytes - mapped.write_position:
                return None
            store_timestamp = max(int(time.time() * 1000), self._last_store_timestamp)
            queued = self._next_queue_offset
            reserved = group.reserve(queued, self._queues)
            bases, targets, ends = self._reserve_new(group) if reserved is None else reserved
            start = group.write_into(mapped, store_timestamp, bases)  # place + append in C
            if start is None:
                start = mapped.start_offset + mapped.write_position
                mapped.append(group.place(start, store_timestamp, bases))
            self._last_store_timestamp = store_timestamp
            try:
                group.append_units(bases, targets)
                self._index_finished(self.index.put_lane(group, start, store_timestamp))
            except DiskError as exc:  # as put_lane_groups
                self.flusher.fail_stop(exc)
                for key, base, end in zip(group.keys, bases, ends, strict=True):
                    self._roll_back(start, key, base, end)
                return None
            self._last_dispatched_timestamp = store_timestamp
            for listener in self._listeners:
                listener(group.keys, queued)
        commit = self._group_commit
        return start, bases, None if commit is None else commit.request(start + group.record_bytes)

    def _reserve_new(self, group: EncodedGroup) -> tuple[list[int], list[ConsumeQueue], list[int]]:
        """``group.reserve`` when one of its queues gets its first message: the queue is created here."""
        queued, keys = self._next_queue_offset, group.keys
        bases = [queued.get(key, 0) for key in keys]
        targets = [self._queues.get(key) or self._queue_for(key) for key in keys]
        ends = [queue.max_physical_offset for queue in targets]  # to roll back to
        for key, base, count in zip(keys, bases, group.key_counts, strict=True):
            queued[key] = base + count
        return bases, targets, ends

    def _index_finished(self, finished: int | None) -> None:
        """An index put's outcome: when it filled a file, that file's end timestamp goes to the checkpoint."""
        if finished is not None and self.checkpoint is not None:
            self.checkpoint.index_msg_timestamp = finished

    def put_lane_groups(self, groups: Sequence[EncodedGroup]) -> list[tuple[int, list[int], Future[int] | None]] | None:
        """``put_lane_group`` of several groups (the sends of several connections read in one
        event-loop turn) as one put: one lock, one store timestamp, one copy into the CommitLog,
        one index put, one dispatch notification and one flush request covering them all.

        One ``(physical start, first queue offsets, flush future)`` per group, in order (they
        share the future), or None with nothing written when the groups together are not for
        this path (as ``put_lane_group``); the caller may then try them one by one.
        """
        if len(groups) == 1:  # a turn's sends merged into one group (ASYNC flush), or one connection's
            placed = self.put_lane_group(groups[0])
            return None if placed is None else [placed]
        if self._write_refusal() is not None:
            return None
        with self._lock:
            mapped = self.commitlog.queue.last_file()
            total = sum(group.record_bytes for group in groups)
            if total + L.END_FILE_MIN_BLANK_LENGTH > mapped.remaining:
                return None
            store_timestamp = max(int(time.time() * 1000), self._last_store_timestamp)
            queued, queues = self._next_queue_offset, self._queues
            start = position = mapped.start_offset + mapped.write_position
            records, planned = [], []
            for group in groups:
                reserved = group.reserve(queued, queues)
                bases, targets, ends = self._reserve_new(group) if reserved is None else reserved
                records.append(group.place(position, store_timestamp, bases))
                planned.append((position, bases, targets, ends))
                position += group.record_bytes
            mapped.append(b"".join(records))
            self._last_store_timestamp = store_timestamp
            try:  # _dispatch's work, each queue's units written in one go
                for group, (_at, bases, targets, _ends) in zip(groups, planned, strict=True):
                    group.append_units(bases, targets)
                hashes, offsets = [], []
                for group in groups:
                    index_hashes, index_offsets = group.index_entries()
                    hashes += index_hashes
                    offsets += index_offsets
                if hashes:
                    self._index_finished(self.index.put(hashes, offsets, [store_timestamp] * len(hashes)))
            except DiskError as exc:  # an index file's msync on its roll: the groups are undone, then refused
                self.flusher.fail_stop(exc)
                for group, (_at, bases, _targets, ends) in zip(reversed(groups), reversed(planned), strict=True):
                    for key, base, end in zip(group.keys, bases, ends, strict=True):  # the first group's last
                        self._roll_back(start, key, base, end)
                return None
            self._last_dispatched_timestamp = store_timestamp
            if self._listeners:
                keys = [key for group in groups for key in group.keys]
                for listener in self._listeners:
                    listener(keys, queued)
        commit = self._group_commit
        flushed = None if commit is None else commit.request(position)
        return [(at, bases, flushed) for at, bases, _targets, _ends in planned]

    def put_messages(self, batch: MessageBatch) -> PutResult:
        """Append ``batch`` and return once it is as durable as the flush mode promises."""
        result, flushed = self.submit_messages(batch)
        if flushed is None:
            return result
        try:
            flushed.result(timeout=self.config.sync_flush_timeout_ms / 1000)
        except Exception as exc:  # a timeout or the flush's own failure: both become a status
            return flush_outcome(result, exc)
        return result

    # -- replication (see store/replica.py) -------------------------------------------------
    def read_commitlog(self, offset: int, max_bytes: int) -> bytes | None:
        """A master's side of replication: the CommitLog bytes from ``offset`` (see ``read_run``)."""
        with self._lock:
            return read_run(self.commitlog, offset, max_bytes)

    def append_replica(self, offset: int, data: bytes | memoryview) -> int:
        """A slave's side: append the master's CommitLog bytes at ``offset``, dispatch the records
        they complete (ConsumeQueues, index, long polls) and return the new max offset.

        Raises :class:`StoreError` when ``offset`` does not continue this log or writes are refused.
        """
        refusal = self._write_refusal(replica=True)
        if refusal is not None:
            raise StoreError(refusal)
        with self._lock:
            if self._replica_dispatched is None:  # start() dispatched everything before the current end
                self._replica_dispatched = self.commitlog.max_offset if self.commitlog.queue.files else offset
            append_run(self.commitlog, offset, data)
            for request in requests_for_scan(self.coder, self.commitlog.scan(self._replica_dispatched, False)):
                key = (request.topic, request.queue_id)
                self._next_queue_offset[key] = max(
                    self._next_queue_offset.get(key, 0), request.queue_offset + len(request.sizes)
                )
                self._last_store_timestamp = max(self._last_store_timestamp, int(request.store_timestamps[-1]))
                self._dispatch(request)
            self._replica_dispatched = self.commitlog.scan_end
            return self.commitlog.max_offset

    def _write_refusal(self, replica: bool = False) -> str | None:
        """Why puts (``replica``: appends of replicated bytes) are refused now (None when they are not)."""
        if self.slave_mode and not replica:
            return "message store is slave mode, so putMessage is forbidden"
        if not self.running:
            return "the message store is not running"
        disk_error = self.flusher.disk_error  # the disk_error property's value, one call less per put
        if disk_error is not None:
            return (
                f"the message store is read-only after a disk error ({disk_error}); "
                "restart the broker once the disk is repaired"
            )
        return self.retention.write_refusal

    def _roll_back(self, start: int, key: tuple[str, int] | None, queue_offset: int, queue_end: int) -> None:
        """Undo a put that failed midway: its ConsumeQueue units, then the CommitLog from ``start``.

        Holds the flush lock too: a flush running meanwhile would otherwise record a flushed
        position past the cut. Index entries left behind are harmless (queries re-check the record).
        """
        queue = self._queues.get(key) if key is not None else None
        with self.flusher.lock:
            if key is not None:
                self._next_queue_offset[key] = queue_offset
            try:
                if queue is not None and queue.max_offset > queue_offset:
                    queue.max_physical_offset = queue_end
                    queue.files.truncate_dirty(queue_offset * UNIT_BYTES)
            except DiskError as exc:
                self.flusher.fail_stop(exc)
            try:
                self.commitlog.queue.truncate_dirty(start)
            except DiskError as exc:
                self.flusher.fail_stop(exc)

    def _dispatch_group(self, group: GroupDispatch) -> None:
        """``_dispatch`` of a group put: one ConsumeQueue write per queue, one index put."""
        for request in group.queues:
            self._dispatch(request)
        if group.index_hashes:
            timestamps = [group.store_timestamp] * len(group.index_hashes)
            self._index_finished(self.index.put(group.index_hashes, group.index_offsets, timestamps))

    def _queue_for(self, key: tuple[str, int]) -> ConsumeQueue:
        """The ConsumeQueue of ``key``, created (and listed in the manifest) on first use; under the lock."""
        queue = self._queues.get(key)
        if queue is None:
            queue = ConsumeQueue(
                key[0], key[1], self.config.consume_queue_dir, self.config.consume_queue_units_per_file, self._map_pool
            )
            self._queues[key] = queue
            self._manifest.add(key)
        return queue

    def _dispatch(self, request: DispatchRequest) -> None:
        with self._lock:
            queue = self._queue_for((request.topic, request.queue_id))
            queue.append(request.queue_offset, request.physical_offsets, request.sizes, request.tags_codes)
            if len(request.index_hashes):
                rows, offsets, timestamps = request.index_rows, request.physical_offsets, request.store_timestamps
                if isinstance(rows, list):  # the plain path of a small batch
                    offsets = [offsets[r] for r in rows]
                    timestamps = [timestamps[r] for r in rows]
                else:
                    offsets = np.asarray(offsets)[rows]
                    timestamps = np.asarray(timestamps)[rows]
                self._index_finished(self.index.put(request.index_hashes, offsets, timestamps))
            self._last_dispatched_timestamp = int(request.store_timestamps[-1])
            if self._listeners:
                key = (request.topic, request.queue_id)
                keys, ends = (key,), {key: queue.max_offset}
                for listener in self._listeners:
                    listener(keys, ends)

    def add_dispatch_listener(self, listener: DispatchListener) -> None:
        """Call ``listener(topic, queue_id, max_offset)`` after every dispatch, once per queue."""

        def per_queue(keys: Sequence[tuple[str, int]], ends: Mapping[tuple[str, int], int]) -> None:
            for topic, queue_id in keys:
                listener(topic, queue_id, ends[topic, queue_id])

        self._listeners.append(per_queue)

    def add_group_dispatch_listener(self, listener: GroupDispatchListener) -> None:
        """Call ``listener(keys, ends)`` once per put, with the (topic, queue id) keys it
        dispatched to and their new max offsets (long polling, replication)."""
        self._listeners.append(listener)

    # -- flush -----------------------------------------------------------------------------
    @property
    def disk_error(self) -> str | None:
        """The first failed fsync/msync, after which the store is read-only (None while healthy)."""
        return self.flusher.disk_error

    def flush(self) -> None:
        """Flush the CommitLog, every ConsumeQueue, the index and the checkpoint now."""
        self.flusher.flush_all()

    # -- reads -----------------------------------------------------------------------------
    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int = DEFAULT_MAX_TRANSFER_BYTES,
        tags_codes: Collection[int] | None = None,
        record_filter: RecordFilter | None = None,
    ) -> GetResult:
        """Read up to ``max_count`` records from ``offset`` of a queue (``group`` names the reader).

        ``tags_codes`` keeps units whose tag code is listed; ``record_filter`` then keeps records
        whose raw properties it accepts (a SQL92 subscription).
        """
        if not self.running:
            raise StoreClosedError("the message store is not running")
        with self._lock:
            return read_queue(
                self.commitlog,
                self._queues.get((topic, queue_id)),
                offset,
                max_count,
                max_bytes,
                tags_codes,
                record_filter,
            )

    def read_frame(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        tags_codes: Collection[int] | None,
        answer: FrameAnswer,
        out: bytearray | None = None,
        reserve: int = 0,
    ) -> tuple[bytes | int, int, int] | None:
        """``get_messages`` of a read that finds records, as its PULL response frame (``reads.read_frame``):
        (frame, records, body bytes), or appended to ``out`` ((its new length, records, body bytes));
        None for any other read, and while the store is not running."""
        if not self.running:
            return None
        with self._lock:
            queue = self._queues.get((topic, queue_id))
            return read_frame(self.commitlog, queue, offset, max_count, max_bytes, tags_codes, answer, out, reserve)

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get((topic, queue_id))
        return queue.max_offset if queue else 0

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get((topic, queue_id))
        return queue.min_offset if queue else 0

    def queue_ids(self) -> dict[str, list[int]]:
        """Every topic that has ConsumeQueues, with its queue ids."""
        topics: dict[str, list[int]] = {}
        for topic, queue_id in sorted(self._queues):
            topics.setdefault(topic, []).append(queue_id)
        return topics

    def _store_timestamp_at_queue_offset(self, queue: ConsumeQueue, offset: int) -> int:
        unit = queue.read_units(offset, 1)
        if len(unit) == 0 or int(unit[0]["size"]) == BLANK_UNIT_SIZE:
            return -1
        head = self.commitlog.read(int(unit[0]["offset"]) + L.POS_STORE_TIMESTAMP, 8)
        return -1 if head is None else int.from_bytes(head, "big", signed=True)

    def earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the first live message of a queue, -1 when there is none."""
        with self._lock:
            queue = self._queues.get((topic, queue_id))
            if queue is None or queue.max_offset <= queue.min_offset:
                return -1
            return self._store_timestamp_at_queue_offset(queue, queue.min_offset)

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset stored at or after ``timestamp`` (the max offset when none is)."""
        with self._lock:
            queue = self._queues.get((topic, queue_id))
            if queue is None:
                return 0
            lo, hi = queue.min_offset, queue.max_offset
            while lo < hi:
                mid = (lo + hi) // 2
                stored = self._store_timestamp_at_queue_offset(queue, mid)
                if 0 <= stored < timestamp:
                    lo = mid + 1
                else:
                    hi = mid
            return lo

    def look_message_by_offset(self, physical_offset: int) -> StoredMessage | None:
        """The record at a physical offset, or None when there is none (or it was deleted)."""
        with self._lock:
            size = self.commitlog.size_at(physical_offset)
            if size < L.RECORD_FIXED_BYTES:
                return None
            data = self.commitlog.read(physical_offset, size)
        if data is None:
            return None
        try:
            return decode_record(data)
        except MessageError:
            return None

    def query_messages(
        self, topic: str, key: str, max_count: int, begin: int = 0, end: int = 2**62
    ) -> list[StoredMessage]:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY equal ``key``, newest first."""
        with self._lock:
            offsets = self.index.query(f"{topic}#{key}", max_count, begin, end)
        found = []
        for offset in offsets:
            message = self.look_message_by_offset(offset)
            if message is None or message.topic != topic:
                continue
            props = message.properties
            if props.get("UNIQ_KEY") == key or key in props.get("KEYS", "").split(" "):
                found.append(message)
        return found

    def delete_topics(self, topics: Collection[str]) -> None:
        """Drop the ConsumeQueues of ``topics`` (their records age out of the CommitLog)."""
        with self._lock, self.flusher.lock:
            for key in [k for k in self._queues if k[0] in topics]:
                self._queues.pop(key).destroy()
                self._next_queue_offset.pop(key, None)
            for topic in topics:
                topic_dir = self.config.consume_queue_dir / topic
                with store_io(f"removing the empty ConsumeQueue directory {topic_dir}"):
                    if topic_dir.exists() and not any(topic_dir.iterdir()):
                        topic_dir.rmdir()
            self._manifest.rewrite(self._queues)

    @property
    def store_dir(self) -> Path:
        return self.config.root_dir
