"""Topic tables for the reader tests, written per ``sparkmq.tables.layout`` with ``deltalake``.

``require_delta()`` skips (with a warning) or, under ``CI=true``, fails a test when Delta's jars for
Spark are missing, naming ``make delta-jars``. ``write_sent`` lands sent messages in a topic's table
the way the broker's materializer does: the raw columns, and per queue one Delta application
transaction whose version is the next queue offset the table holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from sparkmq.client import Message, SendResult
from sparkmq.tables.layout import RAW_SCHEMA, app_id
from sparkmq.tables.spark_delta import missing_jars
from support.rocketmq_java import fail_or_skip


def require_delta() -> None:
    """Delta's jars are in the cache; else fail under CI, skip loudly elsewhere."""
    missing = missing_jars()
    if missing is not None:
        fail_or_skip(missing)


def raw_rows(messages: Sequence[Message], results: Sequence[SendResult], stored_at: datetime) -> pa.Table:
    """The raw table rows of sent ``messages`` (their send ``results`` give queues and offsets)."""
    stamp = stored_at.astimezone(UTC)
    return pa.Table.from_pylist(
        [
            {
                "topic": r.queue.topic,
                "brokerName": r.queue.broker_name,
                "queueId": r.queue.queue_id,
                "queueOffset": r.queue_offset,
                "msgId": r.msg_id,
                "keys": " ".join(m.keys) if m.keys else None,
                "tags": m.tags or None,
                "body": m.body_bytes,
                "properties": sorted(m.properties.items()),
                "bornTimestamp": stamp,
                "storeTimestamp": stamp,
            }
            for m, r in zip(messages, results, strict=True)
        ],
        schema=RAW_SCHEMA,
    )


def write_queue(uri: str, rows: pa.Table, topic: str, queue_id: int, next_offset: int) -> None:
    """Append ``rows`` of one queue with the queue's application transaction at ``next_offset``."""
    write_deltalake(
        uri,
        rows,
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id(topic, queue_id), next_offset)]),
    )


def write_sent(
    uri: str, messages: Sequence[Message], results: Sequence[SendResult], upto: Mapping[int, int] | None = None
) -> None:
    """Land the sent messages, of each queue those below ``upto[queue id]`` (all by default), one commit per queue."""
    rows = raw_rows(messages, results, datetime.now(UTC))
    for queue_id in sorted({r.queue.queue_id for r in results}):
        kept = [r.queue.queue_id == queue_id and (upto is None or r.queue_offset < upto[queue_id]) for r in results]
        if any(kept):
            held = max(r.queue_offset for r, keep in zip(results, kept, strict=True) if keep) + 1
            write_queue(uri, rows.filter(pa.array(kept)), results[0].queue.topic, queue_id, held)


def next_offset(uri: str, topic: str, queue_id: int) -> int | None:
    return DeltaTable(uri).transaction_version(app_id(topic, queue_id))
