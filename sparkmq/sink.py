"""The Spark sink of ``sparkmq``: batch and streaming writers sending rows as messages.

Input columns: ``body`` (binary or string, required), ``topic`` (required unless the
``topic`` option is set; the option wins), ``keys``, ``tags``, ``properties``
map<string,string>, ``queueId`` int, ``shardingKey`` (same key → same queue),
``delayLevel`` int. Each task sends its rows in SEND_BATCH_MESSAGE frames (many in flight)
and reports success only after every broker acknowledgement: at-least-once. A failed send
fails the task, so Spark retries it; ``abort`` says what was not acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import zlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, LongType, MapType, StringType, StructType

from sparkmq.client import loop_thread
from sparkmq.client.message import Message
from sparkmq.client.producer import AsyncProducer
from sparkmq.connector.options import OptionError, SinkOptions
from sparkmq.connector.transactional_writer import TransactionalCommitMessage, TransactionalWriter
from sparkmq.errors import SparkmqError
from sparkmq.client import MessageQueue

logger = logging.getLogger(__name__)
SEND_ATTEMPTS = 3
RETRY_PAUSE_S = 0.5
ROUTE_WAIT_FIRST_PAUSE_S = 0.2
ROUTE_WAIT_MAX_PAUSE_S = 2.0
_producers: dict[tuple[str, str], AsyncProducer] = {}
_producers_lock = threading.Lock()
_COLUMN_TYPES: dict[str, tuple[type, ...]] = {
    "body": (BinaryType, StringType), "topic": (StringType,), "keys": (StringType,), "tags": (StringType,),
    "properties": (MapType,), "queueId": (IntegerType, LongType), "shardingKey": (StringType,),
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
            raise OptionError(name, f"column type {f.dataType.simpleString()} is not {' or '.join(t.__name__ for t in allowed)}")


@dataclass
class SinkCommitMessage(WriterCommitMessage):  # type: ignore[misc]
    """What one task sent: messages per queue and the queue offsets they got."""

    sent: int = 0
    queues: dict[str, tuple[int, int]] = field(default_factory=dict)  # "topic/broker/qid" -> (first, last) offset


def _producer(options: SinkOptions) -> AsyncProducer:
    key = (options.namesrv_addr, options.producer_group)
    with _producers_lock:
        producer = _producers.get(key)
        if producer is None:
            producer = AsyncProducer(options.producer_group, options.namesrv_addr)
            loop_thread.run(producer.start())
            _producers[key] = producer
        return producer


def _rows(batch: pa.RecordBatch, options: SinkOptions) -> list[tuple[Message, int | None, str | None]]:
    """(message, queueId, shardingKey) per row."""
    cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    count = batch.num_rows
    bodies = cols["body"]
    topics = [options.topic] * count if options.topic else cols["topic"]
    absent = [None] * count  # built once: a default list per row and column made this quadratic
    tags, keys, props_column = cols.get("tags", absent), cols.get("keys", absent), cols.get("properties", absent)
    delays, queue_ids = cols.get("delayLevel", absent), cols.get("queueId", absent)
    sharding_keys = cols.get("shardingKey", absent)
    out = []
    for i in range(count):
        body = bodies[i]
        if body is None:
            raise SparkmqError(f"row {i} has a null body")
        if topics[i] is None:
            raise SparkmqError(f"row {i} has a null topic and no 'topic' option is set")
        message = Message(topics[i], body, tags=tags[i], keys=keys[i], properties=dict(props_column[i] or []),
                          delay_level=int(delays[i] or 0))
        out.append((message, queue_ids[i], sharding_keys[i]))
    return out


async def _send_all(producer: AsyncProducer, options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
    result = SinkCommitMessage()
    in_flight = asyncio.Semaphore(options.max_in_flight)
    pending: list[asyncio.Task[None]] = []
    # Rows without queueId/shardingKey go round robin in runs of batch_size, from a random queue: every
    # task starting at queue 0 would pile small writes (a few rows per task or micro-batch) onto queue 0.
    round_robin = random.randrange(1 << 20) * options.batch_size

    async def send(group: list[Message], queue: MessageQueue) -> None:
        async with in_flight:
            for attempt in range(SEND_ATTEMPTS):
                try:
                    if len(group) == 1 or group[0].delay_level > 0:
                        offsets = [(await producer.send(m, queue=queue)).queue_offset for m in group]
                        first, last = offsets[0], offsets[-1]
                    else:
                        first = (await producer.send_batch(group, queue=queue)).queue_offset
                        last = first + len(group) - 1
                    break
                except SparkmqError as exc:
                    if attempt + 1 == SEND_ATTEMPTS or not exc.retriable:
                        raise
                    producer.instance.routes.pop(queue.topic, None)
                    await asyncio.sleep(RETRY_PAUSE_S)
            key = f"{queue.topic}/{queue.broker_name}/{queue.queue_id}"
            low, high = result.queues.get(key, (first, last))
            result.queues[key] = (min(low, first), max(high, last))
            result.sent += len(group)

    for batch in batches:
        groups: dict[MessageQueue, list[Message]] = defaultdict(list)
        routes: dict[str, list[MessageQueue]] = {}  # once per topic and Arrow batch, not per row
        for message, queue_id, sharding_key in _rows(batch, options):
            queues = routes.get(message.topic)
            if queues is None:
                queues = routes[message.topic] = await _writable_queues(producer, message.topic,
                                                                        options.send_retry_timeout_ms / 1000)
            if queue_id is not None:
                matching = [q for q in queues if q.queue_id == queue_id]
                if not matching:
                    raise SparkmqError(f"topic {message.topic} has no queue {queue_id}")
                queue = matching[0]
            elif sharding_key is not None:
                queue = queues[zlib.crc32(sharding_key.encode()) % len(queues)]
            else:
                queue = queues[(round_robin // options.batch_size) % len(queues)]
                round_robin += 1
            groups[queue].append(message)
        for queue, messages in groups.items():
            plain = [m for m in messages if m.delay_level <= 0]
            delayed = [m for m in messages if m.delay_level > 0]
            for first in range(0, len(plain), options.batch_size):
                pending.append(asyncio.get_running_loop().create_task(send(plain[first : first + options.batch_size], queue)))
            if delayed:
                pending.append(asyncio.get_running_loop().create_task(send(delayed, queue)))
    results = await asyncio.gather(*pending, return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise SparkmqError(f"{len(failures)} of {len(pending)} sends failed; first: {failures[0]}") from failures[0]
    return result


async def _writable_queues(producer: AsyncProducer, topic: str, timeout_s: float) -> list[MessageQueue]:
    """The topic's writable queues, waiting (with backoff, up to ``timeout_s``) while no broker serves it.

    While a broker restarts, the NameServer drops its routes: a retried task waits here for
    them to come back instead of failing again at once and using up Spark's task attempts.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    pause = ROUTE_WAIT_FIRST_PAUSE_S
    while True:
        try:
            queues = (await producer.instance.publish_route(topic, "TBW102", 4)).publish_queues()
            if queues:
                return queues
            problem = f"topic {topic} has no writable queue"
        except SparkmqError as exc:
            problem = exc.remark
        if loop.time() + pause > deadline:
            raise SparkmqError(f"no broker serves topic {topic} after waiting {timeout_s:.0f} s "
                               f"(sendRetryTimeout): {problem}", retriable=True)
        producer.instance.routes.pop(topic, None)
        await asyncio.sleep(pause)
        pause = min(pause * 2, ROUTE_WAIT_MAX_PAUSE_S)


class _Writer:
    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_columns(options, schema)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        """Send every row; return only once the broker acknowledged all of them."""
        return loop_thread.run(_send_all(_producer(self.options), self.options, iterator))

    def commit(self, messages: list[SinkCommitMessage | None], batch_id: int | None = None) -> None:
        sent = sum(m.sent for m in messages if m is not None)
        logger.info("sparkmq sink: batch %s committed, %d messages acknowledged", batch_id, sent)

    def abort(self, messages: list[SinkCommitMessage | None], batch_id: int | None = None) -> None:
        done = [m for m in messages if m is not None]
        failed = len(messages) - len(done)
        logger.error("sparkmq sink: batch %s aborted: %d of %d tasks failed (their rows may be partly sent and will be"
                     " sent again on retry); %d messages were acknowledged by the tasks that finished",
                     batch_id, failed, len(messages), sum(m.sent for m in done))


class SparkmqBatchWriter(_Writer, DataSourceArrowWriter):  # type: ignore[misc]
    """``df.write.format("sparkmq")``."""


class SparkmqStreamWriter(_Writer, DataSourceStreamArrowWriter):  # type: ignore[misc]
    """``df.writeStream.format("sparkmq")``."""

    def commit(self, messages: list[SinkCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        super().commit(messages, batchId)

    def abort(self, messages: list[SinkCommitMessage | None], batchId: int) -> None:  # noqa: N803
        super().abort(messages, batchId)


class SparkmqExactlyOnceStreamWriter(SparkmqStreamWriter):  # hook: exactly-once (connector/transactional_writer.py)
    """``df.writeStream.format("sparkmq").option("deliveryGuarantee", "exactly-once")``."""

    def __init__(self, options: SinkOptions, schema: StructType, checkpoint_location: str | None) -> None:
        super().__init__(options, schema)
        self.exactly_once = TransactionalWriter(options, schema, checkpoint_location, _rows, _writable_queues)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TransactionalCommitMessage:  # type: ignore[override]
        return self.exactly_once.write(iterator)

    def commit(self, messages: list[TransactionalCommitMessage | None], batchId: int) -> None:  # type: ignore[override] # noqa: N803
        self.exactly_once.commit(messages, batchId)

    def abort(self, messages: list[TransactionalCommitMessage | None], batchId: int) -> None:  # type: ignore[override] # noqa: N803
        self.exactly_once.abort(messages, batchId)

