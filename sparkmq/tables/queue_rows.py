"""A queue's durable records as Arrow rows: the store's read path, decoded by the connector's Arrow codec.

Only records the CommitLog has flushed (and, on a replicated master, its replicas confirmed) are
taken: a record past that may vanish in a crash or a failover and its queue offset be reused, and a
table must never hold what the queue then lacks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparkmq.connector.arrow import records_to_arrow
from sparkmq.store import MessageStore
from sparkmq.store.status import GetMessageStatus
from sparkmq.tables.layout import RAW_COLUMNS

READER_GROUP = "SPARKMQ_TABLE_WRITER"  # the group name the store's reads are made under
READ_MAX_COUNT = 8192  # records per store read


@dataclass(frozen=True)
class QueueRows:
    """Rows of one queue from ``start``; ``next_offset`` is where the following read begins."""

    queue_id: int
    start: int
    next_offset: int
    batches: tuple[pa.RecordBatch, ...]

    @property
    def count(self) -> int:
        return sum(batch.num_rows for batch in self.batches)


def read_rows(
    store: MessageStore,
    broker_name: str,
    topic: str,
    queue_id: int,
    start: int,
    limit: int,
    replicated: float = math.inf,
) -> QueueRows:
    """Up to about ``limit`` durable records of ``topic``'s queue from ``start`` (its min offset if below),
    none ending past the CommitLog offset ``replicated``."""
    offset = max(start, store.min_offset_in_queue(topic, queue_id))
    end = store.max_offset_in_queue(topic, queue_id)
    flushed = min(store.commitlog.queue.flushed_offset, replicated)
    batches: list[pa.RecordBatch] = []
    taken = 0
    while offset < end and taken < limit:
        result = store.get_messages(READER_GROUP, topic, queue_id, offset, min(READ_MAX_COUNT, limit - taken))
        if result.status == GetMessageStatus.OFFSET_TOO_SMALL:
            offset = result.next_begin_offset
            continue
        if result.status != GetMessageStatus.FOUND:
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset  # blank or removed units: nothing to write for them
            continue
        durable = int(np.searchsorted(result.physical_offsets + result.sizes, flushed, side="right"))
        if durable < result.message_count:
            if durable:
                rows = records_to_arrow(result.body(), broker_name, columns=RAW_COLUMNS, topic=topic)
                batches.append(rows.slice(0, durable))
            offset = int(result.queue_offsets[durable])
            break
        batches.append(records_to_arrow(result.body(), broker_name, columns=RAW_COLUMNS, topic=topic))
        taken += result.message_count
        offset = result.next_begin_offset
    return QueueRows(queue_id, start, offset, tuple(batches))
