"""MessageStore: the facade over CommitLog, ConsumeQueues, IndexFiles, flush and retention.

It holds the parts and the lock, and runs the sequences: ``start`` (steps in ``startup``, then
``recovery``), the puts (entry points here, their steps in ``put_steps``), the pull reads
(``reads``), the lookups (``lookups``), replication (``replica``), ``close``.

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

import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import TypeVar

from sparkmq.errors import DiskError, StoreClosedError, StoreError
from sparkmq.message import layout as L
from sparkmq.message.record import MessageBatch, StoredMessage
from sparkmq.store.body_verify import UNVERIFIED_FILE, BodyVerifier
from sparkmq.store.checkpoint import StoreCheckpoint
from sparkmq.store.commitlog import CommitLog, Resync, ScannedRecord
from sparkmq.store.config import DEFAULT_MAX_TRANSFER_BYTES, StoreConfig, delay_level_millis
from sparkmq.store.consume_queue import ConsumeQueue
from sparkmq.store.damage import INDEX_FILE, REPLICA, DamageReport
from sparkmq.store.disk import store_io
from sparkmq.store.dispatch import (
    DispatchListener,
    GroupDispatch,
    GroupDispatchListener,
    TagsCoder,
    requests_for_replica,
    requests_for_scan,
)
from sparkmq.store.flush import GroupCommitService, PeriodicService, StoreFlush, flush_outcome
from sparkmq.store.index_file import IndexDamage
from sparkmq.store.index_service import IndexService
from sparkmq.store.lane import EncodedGroup
from sparkmq.store.lookups import decode_or_none, earliest_message_time, has_key, offset_by_timestamp, record_at
from sparkmq.store.mapped_file import MapPool
from sparkmq.store.mapped_file_queue import MappedFileQueue
from sparkmq.store.put_steps import (
    append_lane_units,
    dispatch,
    dispatch_group,
    index_finished,
    index_request,
    put_batch,
    put_group,
    refused,
    reserve_keys,
    roll_back,
    write_refusal,
)
from sparkmq.store.queue_manifest import QueueManifest
from sparkmq.store.queue_repair import QueueDamage, repair, reported_elsewhere
from sparkmq.store.reads import MAX_FILTER_SCAN_UNITS, FrameAnswer, RecordFilter, read_frame, read_queue
from sparkmq.store.recovery import Recovery, RecoveryReport, boot_id, read_abort_marker, write_abort_marker
from sparkmq.store.replica import ReplicaDamage, append_run, checked_records, read_run
from sparkmq.store.retention import Retention
from sparkmq.store.startup import acquire_lock, load_index, load_queues, recover_queue_table, replay, start_services
from sparkmq.store.status import GetMessageStatus, GetResult, PutResult
from sparkmq.store.transient_pool import TransientStorePool

logger = logging.getLogger(__name__)
_Read = TypeVar("_Read")
MAX_REPAIRS_PER_READ = 64  # each repair fixes or blanks a unit: a read meets at most this many


class MessageStore:
    """The durable store: ``start()`` recovers, puts append + dispatch, ``close()`` flushes."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.transient_pool = (
            TransientStorePool(config.transient_store_pool_size, config.commitlog_file_bytes)
            if config.transient_store_pool_enable
            else None
        )
        self.commitlog = CommitLog(
            MappedFileQueue(
                config.commitlog_dir, config.commitlog_file_bytes, sync_by_fd=True, transient_pool=self.transient_pool
            ),
            config.store_host,
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
        self._replica_checked: list[ScannedRecord] | None = None  # a slave: the runs' records, to dispatch
        self._replica_held: tuple[int, bytes] = (0, b"")  # a slave: an incomplete record received, and where
        self.slave_mode = False  # BrokerRole.SLAVE: only append_replica writes (DefaultMessageStore.putMessage)
        self.truncations = 0  # times truncate_replica cut the CommitLog (what was derived from its tail is stale)
        self.retention = Retention(self)
        self.flusher = StoreFlush(self)
        self.damage = DamageReport()
        self.verifier = BodyVerifier(
            self.commitlog, self._queues, self.damage, self._lock, config.root_dir / UNVERIFIED_FILE
        )
        self.running = False

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> RecoveryReport:
        """Lock the directory, load, recover, catch up dispatch, start the flush and clean services."""
        cfg = self.config
        with store_io(f"creating the store directory {cfg.root_dir}"):
            cfg.root_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = acquire_lock(cfg)
        last_exit_ok = not cfg.abort_path.exists()
        this_boot = boot_id()
        page_cache_intact = not last_exit_ok and bool(this_boot) and read_abort_marker(cfg.abort_path) == this_boot
        self.commitlog.queue.load()
        self.checkpoint = StoreCheckpoint(cfg.checkpoint_path)
        trusted = last_exit_ok or page_cache_intact
        queues_from = load_queues(cfg, self.commitlog, self._manifest, self._map_pool, self._queues, not trusted)
        index_from = load_index(self.index, self.checkpoint, self.commitlog, trusted, self.damage)
        replay_from = min((offset for offset in (queues_from, index_from) if offset is not None), default=None)
        dispatch_here = partial(dispatch, self)
        recovery = Recovery(
            self.commitlog, self._queues, self.index, self.checkpoint, self.coder, cfg.check_crc_on_recover, self.damage
        )
        begin = recovery.start(last_exit_ok, page_cache_intact)
        replayed = None
        if replay_from is not None and begin is not None:  # up to recovery's start, all settled
            replay_end = replay(
                cfg, self.commitlog, self.coder, dispatch_here, replay_from, begin[0], recovery.resync(True)
            )
            replayed = (replay_from, replay_end)
        report = recovery.run(last_exit_ok, begin, dispatch_here)
        recover_queue_table(self.commitlog, self._queues, self._next_queue_offset, self._manifest)
        write_abort_marker(cfg.abort_path, this_boot)
        unchecked_end = report.dispatched_from if cfg.check_crc_on_recover else 0  # recovery checked from there
        if replayed is not None and replayed[1] >= unchecked_end:  # and the replay from its start
            unchecked_end = min(unchecked_end, replayed[0])
        self.verifier.begin(self.commitlog.min_offset, unchecked_end, cfg.verify_bytes_per_second)
        self._group_commit, self._services = start_services(cfg, self.flusher, self.retention)
        self.running = True
        logger.info("store %s started: %s", cfg.root_dir, report)
        return report

    def close(self) -> None:
        """Stop services, flush everything, persist the checkpoint, remove the abort marker."""
        if not self.running:
            self._release_lock()
            return
        self.running = False
        self.verifier.stop()
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
            if self.transient_pool is not None:
                self.transient_pool.close()
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

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

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
        refusal, max_bytes = write_refusal(self), self.config.max_message_bytes
        results: list[PutResult | None] = [refused(batch, refusal, max_bytes) for batch in batches]
        accepted = [i for i, result in enumerate(results) if result is None]
        end = -1
        if accepted:
            with self._lock:
                store_timestamp = max(int(time.time() * 1000), self._last_store_timestamp)
                group = [batches[i] for i in accepted]
                grouped = put_group(self, group, store_timestamp) if len(group) > 1 else None
                if grouped is None:
                    grouped = [put_batch(self, batch, store_timestamp) for batch in group]
                for i, result in zip(accepted, grouped, strict=True):
                    results[i] = result
                    if result.ok:
                        end = max(end, int(result.physical_offsets[-1]) + int(result.sizes[-1]))
        flushed = self._group_commit.request(end) if self._group_commit is not None and end >= 0 else None
        return results, flushed  # type: ignore[return-value]  # every slot was filled above

    def put_lane_group(self, group: EncodedGroup) -> tuple[int, list[int], Future[int] | None] | None:
        """Append and dispatch a native lane's group of plain single sends, whose records come
        encoded (see :mod:`sparkmq.store.lane`); ``submit_group``'s twin for that shape.

        Returns ``(physical start, the keys' first queue offsets, the group's flush future with
        SYNC flush, else None)``, or None with nothing written when the group is not for this
        path: writes refused, or the records do not fit the current CommitLog segment. The caller
        then serves the same requests the usual way, which answers each of these cases.
        """
        # put_lane_groups for one group (a lone send's read), without the steps that join groups
        if write_refusal(self) is not None:
            return None
        with self._lock:
            files = self.commitlog.queue.files
            mapped = files[-1] if files else self.commitlog.queue.last_file()  # a full one: declined below
            if group.record_bytes + L.END_FILE_MIN_BLANK_LENGTH > mapped.file_bytes - mapped.write_position:
                return None
            store_timestamp = int(time.time() * 1000)
            if store_timestamp < self._last_store_timestamp:  # never before the last put (max() costs more)
                store_timestamp = self._last_store_timestamp
            queued = self._next_queue_offset
            bases, targets, ends = reserve_keys(self, group)
            start = mapped.start_offset + mapped.write_position
            mapped.append(group.place(start, store_timestamp, bases))
            self._last_store_timestamp = store_timestamp
            try:
                append_lane_units(group, bases, targets)
                finished = self.index.put_lane(group, start, store_timestamp)
                if finished is not None:
                    index_finished(self, finished)
            except DiskError as exc:  # as put_lane_groups
                self.flusher.fail_stop(exc)
                for key, base, end in zip(group.keys, bases, ends, strict=True):
                    roll_back(self, start, key, base, end)
                return None
            self._last_dispatched_timestamp = store_timestamp
            if self._listeners:
                keys = group.keys  # one copy of the group's list for all of them
                for listener in self._listeners:
                    listener(keys, queued)
        commit = self._group_commit
        return start, bases, None if commit is None else commit.request(start + group.record_bytes)

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
        if write_refusal(self) is not None:
            return None
        with self._lock:
            mapped = self.commitlog.queue.last_file()
            total = sum(group.record_bytes for group in groups)
            if total + L.END_FILE_MIN_BLANK_LENGTH > mapped.remaining:
                return None
            store_timestamp = max(int(time.time() * 1000), self._last_store_timestamp)
            queued = self._next_queue_offset
            start = position = mapped.start_offset + mapped.write_position
            records, planned = [], []
            for group in groups:
                bases, targets, ends = reserve_keys(self, group)
                records.append(group.place(position, store_timestamp, bases))
                planned.append((position, bases, targets, ends))
                position += group.record_bytes
            mapped.append(b"".join(records))
            self._last_store_timestamp = store_timestamp
            try:  # dispatch's work (put_steps), each queue's units written in one go
                for group, (_at, bases, targets, _ends) in zip(groups, planned, strict=True):
                    append_lane_units(group, bases, targets)
                hashes, offsets = [], []
                for group in groups:
                    index_hashes, index_offsets = group.index_entries()
                    hashes += index_hashes
                    offsets += index_offsets
                if hashes:
                    index_finished(self, self.index.put(hashes, offsets, [store_timestamp] * len(hashes)))
            except DiskError as exc:  # an index file's msync on its roll: the groups are undone, then refused
                self.flusher.fail_stop(exc)
                for group, (_at, bases, _targets, ends) in zip(reversed(groups), reversed(planned), strict=True):
                    for key, base, end in zip(group.keys, bases, ends, strict=True):  # the first group's last
                        roll_back(self, start, key, base, end)
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
        """A slave's side: append the whole records of the master's CommitLog bytes at ``offset``
        (``replica.whole_records``; an incomplete last one waits for the next run, which continues
        it) and return the new max offset; ``dispatch_replica`` then derives their ConsumeQueue units
        and index entries (the slave acknowledges in between, as Java's HAClient reports its offset
        before its ReputMessageService dispatches).

        Raises :class:`StoreError` when ``offset`` does not continue this log or writes are refused,
        :class:`ReplicaDamage` (reported as damage) when the bytes fail a check: nothing of them is
        stored, and the next run must start again at the log's end.
        """
        refusal = write_refusal(self, replica=True)
        if refusal is not None:
            raise StoreError(refusal)
        with self._lock:
            held_at, held = self._replica_held
            self._replica_held = (0, b"")
            if held and offset == held_at + len(held):
                offset, data = held_at, held + data
            try:
                whole, records = checked_records(data, offset, self.commitlog.file_bytes)
            except ReplicaDamage as damage:
                self.damage.found(REPLICA, "refused", f"CommitLog offset {damage.offset}", damage.detail)
                raise
            if self._replica_dispatched is None:  # start() dispatched everything before the current end
                self._replica_dispatched = self.commitlog.max_offset if self.commitlog.queue.files else offset
            if whole:
                append_run(self.commitlog, offset, memoryview(data)[:whole])
            self._replica_held = (offset + whole, bytes(data[whole:]))
            # The records checked since dispatch last ran are all there is to dispatch when they start where it stands.
            if self._replica_dispatched == offset:
                self._replica_checked = records
            elif self._replica_checked is not None and offset == held_at:  # they continue the last run's
                self._replica_checked += records
            else:
                self._replica_checked = None
            return self.commitlog.max_offset

    def dispatch_replica(self) -> None:
        """A slave's dispatch (ConsumeQueues, index, long polls) of the records ``append_replica`` appended."""
        with self._lock:
            start, checked = self._replica_dispatched, self._replica_checked
            self._replica_checked = None
            if start is None or start >= self._replica_held[0]:
                return
            scanned = checked if checked is not None else self.commitlog.scan(start, False)
            for item in requests_for_replica(self.coder, scanned):
                for request in item.queues if isinstance(item, GroupDispatch) else (item,):
                    key = (request.topic, request.queue_id)
                    self._next_queue_offset[key] = max(
                        self._next_queue_offset.get(key, 0), request.queue_offset + len(request.sizes)
                    )
                    self._last_store_timestamp = max(self._last_store_timestamp, int(request.store_timestamps[-1]))
                if isinstance(item, GroupDispatch):
                    dispatch_group(self, item)
                else:
                    dispatch(self, item)
            self._replica_dispatched = self._replica_held[0] if checked is not None else self.commitlog.scan_end

    @property
    def replica_records_end(self) -> int:
        """Where a replica's last whole record ends (the link may have stopped inside one)."""
        with self._lock:
            end = self._replica_dispatched
            return self.commitlog.max_offset if end is None else min(end, self.commitlog.max_offset)

    def truncate_replica(self, offset: int) -> int:
        """A replica's divergent tail goes: the CommitLog ends at ``offset``, and the ConsumeQueues,
        the index and the queue offsets derived from it follow. Only while writes are refused
        (``slave_mode``); returns the new max offset."""
        if not self.slave_mode:
            raise StoreError("only a replica's CommitLog is truncated to its master's")
        with self._lock:
            if offset >= self.commitlog.max_offset:
                return self.commitlog.max_offset
            logger.warning(
                "store %s: CommitLog cut from %d to %d", self.config.root_dir, self.commitlog.max_offset, offset
            )
            self.commitlog.queue.truncate_dirty(offset)
            for queue in self._queues.values():
                queue.truncate_after_physical(offset)
            self.index.truncate_after(offset)
            recover_queue_table(self.commitlog, self._queues, self._next_queue_offset, self._manifest)
            self._replica_dispatched = self.commitlog.max_offset
            self._replica_held = (0, b"")
            self.truncations += 1
            self._replica_checked = None
            return self.commitlog.max_offset

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
            queue = self._queues.get((topic, queue_id))
            read = partial(read_queue, self.commitlog, queue, offset, max_count, max_bytes, tags_codes, record_filter)
            for _ in range(MAX_REPAIRS_PER_READ):
                result = self._repairing(read)
                if result.status is not GetMessageStatus.FOUND or queue is None or self.verifier.quiet:
                    return result
                taken = (result.queue_offsets.tolist(), result.physical_offsets.tolist(), result.sizes.tolist())
                if self.verifier.check_taken(queue, *taken):
                    return result
            return self._repairing(read)

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
            window = max_count if tags_codes is None else max(max_count, MAX_FILTER_SCAN_UNITS)
            if queue is not None and self.verifier.units_pending(queue, offset, window):
                return None  # get_messages checks the records it takes
            frame = partial(read_frame, self.commitlog, queue, offset, max_count, max_bytes, tags_codes, answer)
            return self._repairing(partial(frame, out, reserve))

    def _repairing(self, read: Callable[[], _Read]) -> _Read:
        """``read()``, after repairing each damaged ConsumeQueue unit it meets (``queue_repair``)."""
        for _ in range(MAX_REPAIRS_PER_READ):
            try:
                return read()
            except QueueDamage as damage:
                repair(self.commitlog, damage.queue, self.coder, damage.queue_offset, self.damage)
        return read()

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

    def earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the first live message of a queue, -1 when there is none."""
        with self._lock:
            return earliest_message_time(self.commitlog, self._queues.get((topic, queue_id)))

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset stored at or after ``timestamp`` (the max offset when none is)."""
        with self._lock:
            return offset_by_timestamp(self.commitlog, self._queues.get((topic, queue_id)), timestamp)

    def look_message_by_offset(self, physical_offset: int) -> StoredMessage | None:
        """The record at a physical offset, or None when there is none (or it was deleted)."""
        with self._lock:
            data = record_at(self.commitlog, physical_offset)
        message = decode_or_none(data)  # outside the lock
        if message is None or message.physical_offset != physical_offset:
            return None
        with self._lock:
            return message if self.verifier.check_read(physical_offset, message.total_size) else None

    def query_messages(
        self, topic: str, key: str, max_count: int, begin: int = 0, end: int = 2**62
    ) -> list[StoredMessage]:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY equal ``key``, newest first."""
        with self._lock:
            offsets = self._index_query(f"{topic}#{key}", max_count, begin, end)
        messages = [self.look_message_by_offset(offset) for offset in offsets]
        return [message for message in messages if message is not None and has_key(message, topic, key)]

    def _index_query(self, key: str, max_count: int, begin: int, end: int) -> list[int]:
        """``index.query``, rebuilding each damaged index file it meets from the CommitLog first."""
        for _ in range(len(self.index.files)):
            try:
                return self.index.query(key, max_count, begin, end)
            except IndexDamage as damage:
                self.rebuild_index(damage)
        return self.index.query(key, max_count, begin, end)

    def rebuild_index(self, damage: IndexDamage) -> None:
        """Report ``damage``, drop its file and the newer ones, and index the CommitLog again from there."""
        self.damage.found(INDEX_FILE, "rebuilt", f"{damage.index.path} position {damage.position}", damage.detail)
        start = max(self.index.drop_from(damage.index), self.commitlog.min_offset)
        records = self.commitlog.scan(start, False, Resync(2**63 - 1, reported_elsewhere))
        for request in requests_for_scan(self.coder, records):
            index_request(self, request)

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
