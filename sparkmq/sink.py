"""The Spark sink of ``sparkmq``: batch and streaming writers sending rows as messages.

Input columns: ``body`` (binary or string, required), ``topic`` (required unless the
``topic`` option is set; the option wins), ``keys``, ``tags``, ``properties``
map<string,string>, ``queueId`` int, ``shardingKey`` (same key → same queue),
``delayLevel`` int. Each task reads Spark's Arrow batches on its own thread, encodes the rows
in bulk (``connector.batch_body``; ``Message`` objects only for properties and delays) into
SEND_BATCH_MESSAGE frames of ``batchSize`` rows, keeps at most ``maxInFlight`` of them
unacknowledged, and reports success only after every broker acknowledgement: at-least-once.
An answer that stored a message without confirming its flush or replication
(FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE: ``DurabilityNotConfirmedError``) is
no acknowledgement: it is retried, then fails the task like any failed send, so Spark retries it;
``abort`` says what was not acknowledged. A send that reached no broker (a group's master died and
its successor is not elected yet) is tried again with a fresh route for up to ``sendRetryTimeout``
(the producer's ``retry_timeout_s``) before it fails the task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, LongType, MapType, StringType, StructType

from sparkmq.connector.sink_commit import SinkCommitMessage
from sparkmq.connector.sink_options import SinkOptions
from sparkmq.errors import OptionError

if TYPE_CHECKING:
    import pyarrow as pa

    from sparkmq.connector.transactional_writer import TransactionalCommitMessage, TransactionalWriter

__all__ = ["SinkCommitMessage", "SparkmqBatchWriter", "SparkmqExactlyOnceStreamWriter", "SparkmqStreamWriter"]

logger = logging.getLogger(__name__)

_COLUMN_TYPES: dict[str, tuple[type, ...]] = {
    "body": (BinaryType, StringType),
    "topic": (StringType,),
    "keys": (StringType,),
    "tags": (StringType,),
    "properties": (MapType,),
    "queueId": (IntegerType, LongType),
    "shardingKey": (StringType,),
    "delayLevel": (IntegerType, LongType),
}


def check_columns(options: SinkOptions, schema: StructType) -> None:
    """Reject input the sink cannot write, naming the column."""
    names = {f.name: f for f in schema.fields}
    if "body" not in names:
        raise OptionError("body", "the sink needs a 'body' column (binary or string)")
    if options.topic is None and "topic" not in names:
        raise OptionError("topic", "set the 'topic' option or give the DataFrame a 'topic' column")
    for name, f in names.items():
        allowed = _COLUMN_TYPES.get(name)
        if allowed is not None and not isinstance(f.dataType, allowed):
            raise OptionError(
                name, f"column type {f.dataType.simpleString()} is not {' or '.join(t.__name__ for t in allowed)}"
            )


class _Writer:
    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_columns(options, schema)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Send every row; return only once the broker acknowledged all of them."""
        from sparkmq.connector.sink_send import producer_for, send_all  # the task's side only

        return send_all(producer_for(self.options), self.options, iterator)

    # ``batchId`` is Spark's parameter name (DataSourceStreamWriter); a batch write passes none.
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int | None = None) -> None:
        sent = sum(m.sent for m in messages if isinstance(m, SinkCommitMessage))
        logger.info("sparkmq sink: batch %s committed, %d messages acknowledged", batchId, sent)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int | None = None) -> None:
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        failed = len(messages) - len(done)
        logger.error(
            "sparkmq sink: batch %s aborted: %d of %d tasks failed (their rows may be partly sent and will be"
            " sent again on retry); %d messages were acknowledged by the tasks that finished",
            batchId,
            failed,
            len(messages),
            sum(m.sent for m in done),
        )


class SparkmqBatchWriter(_Writer, DataSourceArrowWriter):
    """``df.write.format("sparkmq")``."""


class SparkmqStreamWriter(_Writer, DataSourceStreamArrowWriter):
    """``df.writeStream.format("sparkmq")``."""


class SparkmqExactlyOnceStreamWriter(SparkmqStreamWriter):  # hook: exactly-once (connector/transactional_writer.py)
    """``df.writeStream.format("sparkmq").option("deliveryGuarantee", "exactly-once")``."""

    def __init__(self, options: SinkOptions, schema: StructType, checkpoint_location: str | None) -> None:
        from sparkmq.connector.sink_send import place_runs
        from sparkmq.connector.transactional_writer import TransactionalWriter

        super().__init__(options, schema)
        self.exactly_once: TransactionalWriter = TransactionalWriter(options, schema, checkpoint_location, place_runs)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self.exactly_once.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int | None = None) -> None:
        self.exactly_once.commit(_transactional(messages), _required(batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int | None = None) -> None:
        self.exactly_once.abort(_transactional(messages), _required(batchId))


def _transactional(messages: list[WriterCommitMessage | None]) -> list[TransactionalCommitMessage | None]:
    from sparkmq.connector.transactional_writer import TransactionalCommitMessage

    return [m if isinstance(m, TransactionalCommitMessage) else None for m in messages]


def _required(batch_id: int | None) -> int:
    if batch_id is None:
        raise TypeError("a streaming commit needs Spark's batchId")
    return batch_id
