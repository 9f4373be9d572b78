"""The steps of ``MessageStore``'s puts: refusals, a batch's or a group's append and dispatch,
dispatch into ConsumeQueues / index / listeners, and the rollback of a put that failed midway.

These are part of the store (they read and write its queue table and timestamps, and run under
its lock, as their callers in ``message_store`` hold it). They are module functions taking the
store rather than a collaborator's methods so that each step stays one call, as the method it
was: the put path of single sends counts its calls.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from sparkmq.errors import DiskError, MessageError, PropertiesTooLargeError, SegmentAllocationError
from sparkmq.message import layout as L
from sparkmq.message.record import SMALL_BATCH_MAX, MessageBatch
from sparkmq.store.consume_queue import UNIT_BYTES, ConsumeQueue
from sparkmq.store.dispatch import DispatchRequest, GroupDispatch, dispatch_for_group, request_for_put
from sparkmq.store.lane import EncodedGroup
from sparkmq.store.status import PutMessageStatus, PutResult

if TYPE_CHECKING:
    from sparkmq.store.message_store import MessageStore

logger = logging.getLogger(__name__)


def write_refusal(store: MessageStore, replica: bool = False) -> str | None:
    """Why puts (``replica``: appends of replicated bytes) are refused now (None when they are not)."""
    if store.slave_mode and not replica:
        return "message store is slave mode, so putMessage is forbidden"
    if not store.running:
        return "the message store is not running"
    disk_error = store.flusher.disk_error  # the disk_error property's value, one call less per put
    if disk_error is not None:
        return (
            f"the message store is read-only after a disk error ({disk_error}); "
            "restart the broker once the disk is repaired"
        )
    return store.retention.write_refusal


def refused(batch: MessageBatch, refusal: str | None, max_message_bytes: int) -> PutResult | None:
    """The result of a batch refused before the lock (None: go on and store it)."""
    try:
        batch.check_sizes(max_message_bytes)
    except PropertiesTooLargeError as exc:
        return PutResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, exc.remark)
    except MessageError as exc:
        return PutResult(PutMessageStatus.MESSAGE_ILLEGAL, exc.remark)
    if refusal is not None:
        return PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, refusal)
    if len(batch) == 0:
        return PutResult(PutMessageStatus.MESSAGE_ILLEGAL, "empty batch")
    return None


def put_batch(store: MessageStore, batch: MessageBatch, store_timestamp: int) -> PutResult:
    """Append and dispatch one batch (under the store lock); a failure rolls it back."""
    key = (batch.topic, batch.queue_id)
    dispatched = L.transaction_type(batch.sys_flag) in (L.TRANSACTION_NOT_TYPE, L.TRANSACTION_COMMIT_TYPE)
    queue_offset = store._next_queue_offset.get(key, 0) if dispatched else 0
    start = store.commitlog.max_offset
    queue = store._queues.get(key)
    queue_end = queue.max_physical_offset if queue is not None else -1
    try:
        appended = store.commitlog.append(batch, queue_offset, store_timestamp)
        store._last_store_timestamp = store_timestamp
        if dispatched:
            store._next_queue_offset[key] = queue_offset + len(batch)
            dispatch(
                store,
                request_for_put(
                    store.coder,
                    batch.topic,
                    batch.queue_id,
                    queue_offset,
                    batch.properties,
                    appended.physical_offsets,
                    appended.sizes,
                    store_timestamp,
                ),
            )
    except SegmentAllocationError as exc:
        roll_back(store, start, key if dispatched else None, queue_offset, queue_end)
        logger.error("put to %s/%d refused: %s", batch.topic, batch.queue_id, exc.remark)
        return PutResult(
            PutMessageStatus.CREATE_MAPEDFILE_FAILED,
            f"create mapped file failed, server is busy or broken: {exc.remark}",
        )
    except DiskError as exc:  # an index file's msync on its roll
        store.flusher.fail_stop(exc)
        roll_back(store, start, key if dispatched else None, queue_offset, queue_end)
        return PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, f"the message was not stored: {exc}")
    return PutResult(
        PutMessageStatus.PUT_OK,
        "",
        np.asarray(appended.physical_offsets, dtype=np.int64),
        np.asarray(appended.sizes, dtype=np.int64),
        queue_offset,
        store_timestamp,
        store.config.store_host,
    )


def put_group(store: MessageStore, group: list[MessageBatch], store_timestamp: int) -> list[PutResult] | None:
    """The group put's one copy and one dispatch (under the store lock); None (nothing done) when
    it does not apply: a batch is not small, or the group does not fit the current CommitLog segment."""
    if any(len(batch) > SMALL_BATCH_MAX for batch in group):
        return None
    planned: dict[tuple[str, int], int] = {}
    queue_offsets = []
    for batch in group:
        key = (batch.topic, batch.queue_id)
        if L.transaction_type(batch.sys_flag) in (L.TRANSACTION_NOT_TYPE, L.TRANSACTION_COMMIT_TYPE):
            queue_offset = planned.get(key)
            if queue_offset is None:
                queue_offset = store._next_queue_offset.get(key, 0)
            planned[key] = queue_offset + len(batch)
            queue_offsets.append(queue_offset)
        else:
            queue_offsets.append(-1)  # a half or rolled-back transaction message: not dispatched
    start = store.commitlog.max_offset
    try:
        physical = store.commitlog.append_group(group, [max(q, 0) for q in queue_offsets], store_timestamp)
    except SegmentAllocationError:
        return None  # batch by batch, each answered with the failure
    if physical is None:
        return None
    store._last_store_timestamp = store_timestamp
    saved = {key: store._next_queue_offset.get(key, 0) for key in planned}
    queue_ends = {key: queue.max_physical_offset if (queue := store._queues.get(key)) else -1 for key in planned}
    store._next_queue_offset.update(planned)
    appended = [
        (b.topic, b.queue_id, q, b.properties, p, b.size_list)
        for b, q, p in zip(group, queue_offsets, physical, strict=True)
        if q >= 0
    ]
    try:
        dispatch_group(store, dispatch_for_group(store.coder, appended, store_timestamp))
    except DiskError as exc:  # an index file's msync on its roll: the whole group is undone
        store.flusher.fail_stop(exc)
        for key, offset in saved.items():
            roll_back(store, start, key, offset, queue_ends[key])
        return [PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, f"the message was not stored: {exc}") for _ in group]
    flat = np.array([p for offsets in physical for p in offsets], dtype=np.int64)
    sizes = np.array([s for batch in group for s in batch.size_list], dtype=np.int64)
    results, first, host = [], 0, store.config.store_host
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


def reserve_keys(store: MessageStore, group: EncodedGroup) -> tuple[list[int], list[ConsumeQueue], list[int]]:
    """A lane group's queues, planned: per key its first queue offset, its ConsumeQueue (created
    on first use) and that queue's end to roll back to; the store's next offsets move past the group."""
    queued, queues, keys = store._next_queue_offset, store._queues, group.keys
    # Plain loops and indexes: a comprehension is one call more per put, a zip(strict=True) a keyword parse.
    targets, bases, ends, counts = [], [], [], group.key_counts
    for key in keys:  # all of them before an offset moves
        targets.append(queues.get(key) or queue_for(store, key))
    for i, key in enumerate(keys):
        base = queued.get(key, 0)
        queued[key] = base + counts[i]
        bases.append(base)
        ends.append(targets[i].max_physical_offset)
    return bases, targets, ends


def append_lane_units(group: EncodedGroup, bases: list[int], targets: list[ConsumeQueue]) -> None:
    """A placed lane group's ConsumeQueue units, each key's written in one go (``reserve_keys``' plan)."""
    for i, (units, end) in enumerate(group.queue_units()):  # one per key, as targets and bases
        targets[i].append_units(bases[i], units, end)


def index_finished(store: MessageStore, finished: int | None) -> None:
    """An index put's outcome: when it filled a file, that file's end timestamp goes to the checkpoint."""
    if finished is not None and store.checkpoint is not None:
        store.checkpoint.index_msg_timestamp = finished


def roll_back(store: MessageStore, start: int, key: tuple[str, int] | None, queue_offset: int, queue_end: int) -> None:
    """Undo a put that failed midway: its ConsumeQueue units, then the CommitLog from ``start``.

    Holds the flush lock too: a flush running meanwhile would otherwise record a flushed
    position past the cut. Index entries left behind are harmless (queries re-check the record).
    """
    queue = store._queues.get(key) if key is not None else None
    with store.flusher.lock:
        if key is not None:
            store._next_queue_offset[key] = queue_offset
        try:
            if queue is not None and queue.max_offset > queue_offset:
                queue.max_physical_offset = queue_end
                queue.files.truncate_dirty(queue_offset * UNIT_BYTES)
        except DiskError as exc:
            store.flusher.fail_stop(exc)
        try:
            store.commitlog.queue.truncate_dirty(start)
        except DiskError as exc:
            store.flusher.fail_stop(exc)


def dispatch_group(store: MessageStore, group: GroupDispatch) -> None:
    """``dispatch`` of a group put: one ConsumeQueue write per queue, one index put."""
    for request in group.queues:
        dispatch(store, request)
    if group.index_hashes:
        index_finished(store, store.index.put(group.index_hashes, group.index_offsets, group.index_timestamps))


def queue_for(store: MessageStore, key: tuple[str, int]) -> ConsumeQueue:
    """The ConsumeQueue of ``key``, created (and listed in the manifest) on first use; under the lock."""
    queue = store._queues.get(key)
    if queue is None:
        config = store.config
        queue = ConsumeQueue(
            key[0], key[1], config.consume_queue_dir, config.consume_queue_units_per_file, store._map_pool
        )
        store._queues[key] = queue
        store._manifest.add(key)
    return queue


def index_request(store: MessageStore, request: DispatchRequest) -> None:
    """Put ``request``'s index entries (what the index already holds is skipped)."""
    if len(request.index_hashes):
        rows, offsets, timestamps = request.index_rows, request.physical_offsets, request.store_timestamps
        if isinstance(rows, list):  # the plain path of a small batch
            offsets = [offsets[r] for r in rows]
            timestamps = [timestamps[r] for r in rows]
        else:
            offsets = np.asarray(offsets)[rows]
            timestamps = np.asarray(timestamps)[rows]
        index_finished(store, store.index.put(request.index_hashes, offsets, timestamps))


def dispatch(store: MessageStore, request: DispatchRequest) -> None:
    """Write ``request``'s ConsumeQueue units and index entries, then tell the dispatch listeners."""
    with store._lock:
        queue = queue_for(store, (request.topic, request.queue_id))
        queue.append(request.queue_offset, request.physical_offsets, request.sizes, request.tags_codes)
        index_request(store, request)
        store._last_dispatched_timestamp = int(request.store_timestamps[-1])
        if store._listeners:
            key = (request.topic, request.queue_id)
            keys, ends = (key,), {key: queue.max_offset}
            for listener in store._listeners:
                listener(keys, ends)
