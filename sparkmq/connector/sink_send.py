"""The sink's sending, in each Spark task: rows placed on queues, encoded in bulk, sent through a cached
producer with at most ``maxInFlight`` sends unacknowledged (``sparkmq.sink`` documents the behaviour).

Apart from :mod:`sparkmq.sink` so that the driver's processes (the data source lookup, the writer's
creation, the streaming commit) unpickle the writer without importing the client, numpy and pyarrow.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import zlib
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, wait

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from sparkmq.client import MessageQueue, loop_thread
from sparkmq.client.message import Message
from sparkmq.client.producer import AsyncProducer
from sparkmq.client.security import ClientSecurity
from sparkmq.client.send_frames import DEFAULT_TOPIC_QUEUE_NUMS
from sparkmq.connector.batch_body import BulkIds, encode_rows
from sparkmq.connector.sink_commit import SinkCommitMessage
from sparkmq.connector.sink_options import SinkOptions
from sparkmq.errors import SparkmqError
from sparkmq.message.names import AUTO_CREATE_TOPIC_KEY

logger = logging.getLogger("sparkmq.sink")  # the sink's log, as before the split
_RANDOM = random.Random()  # our own: library code must not move the global random state (tests seed it)
MAX_RUN_BYTES = 1024 * 1024  # one send's items stay well within the broker's 4 MiB message limit
ROUTE_WAIT_FIRST_PAUSE_S = 0.2
ROUTE_WAIT_MAX_PAUSE_S = 2.0
_producers: dict[tuple[str, str, ClientSecurity, int], AsyncProducer] = {}
_producers_lock = threading.Lock()
_IDS = BulkIds()  # UNIQ_KEYs of the rows encoded in bulk, for every task of this worker


def producer_for(options: SinkOptions) -> AsyncProducer:
    key = (options.namesrv_addr, options.producer_group, options.security, options.send_retry_timeout_ms)
    with _producers_lock:
        producer = _producers.get(key)
        if producer is None:
            producer = AsyncProducer(
                options.producer_group,
                options.namesrv_addr,
                retry_timeout_s=options.send_retry_timeout_ms / 1000,
                security=options.security,
            )
            loop_thread.run(producer.start())
            _producers[key] = producer
        return producer


def _messages(batch: pa.RecordBatch, topics: list[str], extra: Mapping[str, str] | None = None) -> list[Message]:
    """A ``Message`` per row (the reference path, for rows ``encode_rows`` leaves alone)."""
    cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    absent = [None] * batch.num_rows  # built once: a default list per row and column made this quadratic
    tags, keys, props_column = cols.get("tags", absent), cols.get("keys", absent), cols.get("properties", absent)
    delays = cols.get("delayLevel", absent)
    return [
        Message(
            topic,
            body,
            tags=tag,
            keys=key,
            properties={**dict(props or []), **(extra or {})},
            delay_level=int(delay or 0),
        )
        for topic, body, tag, key, props, delay in zip(
            topics, cols["body"], tags, keys, props_column, delays, strict=True
        )
    ]


def _row_topics(batch: pa.RecordBatch, options: SinkOptions) -> tuple[list[str], npt.NDArray[np.int64]]:
    """The batch's distinct topics and each row's index into them; null bodies and topics are errors."""
    bodies = batch.column("body")
    if bodies.null_count:
        raise SparkmqError(f"row {_first_null(bodies)} has a null body")
    if options.topic:
        return [options.topic], np.zeros(batch.num_rows, dtype=np.int64)
    column = batch.column("topic")
    if column.null_count:
        raise SparkmqError(f"row {_first_null(column)} has a null topic and no 'topic' option is set")
    encoded = pc.dictionary_encode(column)
    return encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _first_null(column: pa.Array) -> int:
    return int(np.flatnonzero(pc.is_null(column).to_numpy(zero_copy_only=False))[0])


class _Sender:
    """Sends message groups from the task's thread through the client loop, at most ``max_in_flight`` at once.

    Spark's iterator is consumed on the task's own thread, never on the process-wide client loop
    (a blocking ``next()`` there would stall heartbeats and lock renewals of every other client of
    the worker). ``submit`` blocks while ``max_in_flight`` sends are unacknowledged: back-pressure
    from the broker to the iterator, so a task holds at most ``max_in_flight × batchSize`` messages
    plus one Arrow batch. Groups of an ordered queue (rows placed by ``shardingKey`` or ``queueId``)
    form a lane: each send waits for the previous one of its queue, so they land in row order.
    """

    def __init__(self, producer: AsyncProducer, options: SinkOptions) -> None:
        self.producer = producer
        self.result = SinkCommitMessage()
        self._slots = threading.BoundedSemaphore(options.max_in_flight)
        self._lock = threading.Lock()
        self._pending: set[Future[None]] = set()
        self._lanes: dict[MessageQueue, Future[None]] = {}
        self._failures: list[BaseException] = []
        self._submitted = 0

    def submit(self, payload: list[Message] | bytes, count: int, queue: MessageQueue, ordered: bool) -> None:
        """Send ``count`` messages (``Message`` objects, or encoded SEND_BATCH items) to ``queue``."""
        self._slots.acquire()
        self._raise_first_failure()
        previous = self._lanes.get(queue) if ordered else None
        future = loop_thread.submit(self._send(payload, count, queue, previous))
        with self._lock:
            self._pending.add(future)
            self._submitted += 1
        if ordered:
            self._lanes[queue] = future
        future.add_done_callback(self._done)

    def _done(self, future: Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)
            failure = future.exception()
            if failure is not None:
                self._failures.append(failure)
        self._slots.release()

    def _raise_first_failure(self) -> None:
        with self._lock:
            failures, submitted = list(self._failures), self._submitted
        if failures:
            raise SparkmqError(f"{len(failures)} of {submitted} sends failed; first: {failures[0]}") from failures[0]

    def drain(self) -> None:
        """Wait for every send submitted so far."""
        with self._lock:
            pending = list(self._pending)
        wait(pending)
        for failure in self._failures:
            logger.error("sparkmq sink: a send failed while the task was failing already: %s", failure)

    def finish(self) -> SinkCommitMessage:
        """Wait for every send; raise if any failed."""
        with self._lock:
            pending = list(self._pending)
        wait(pending)
        self._raise_first_failure()
        return self.result

    async def _send(
        self, payload: list[Message] | bytes, count: int, queue: MessageQueue, previous: Future[None] | None
    ) -> None:
        if previous is not None:
            await asyncio.wrap_future(previous)  # its failure fails this send too: never overtake it
        producer = self.producer
        if isinstance(payload, bytes):
            first = (await producer.send_encoded_batch(queue.topic, payload, queue)).queue_offset
        elif count == 1 or payload[0].delay_level > 0:
            first = [(await producer.send(m, queue=queue)).queue_offset for m in payload][0]
        else:
            first = (await producer.send_batch(payload, queue=queue)).queue_offset
        last = first + count - 1  # a delayed message's offset is in the schedule topic: only a rough range
        key = f"{queue.topic}/{queue.broker_name}/{queue.queue_id}"
        low, high = self.result.queues.get(key, (first, last))
        self.result.queues[key] = (min(low, first), max(high, last))
        self.result.sent += count


def send_all(producer: AsyncProducer, options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
    """Send every row of ``batches`` (consumed on the calling thread); return once all are acknowledged."""
    sender = _Sender(producer, options)
    # Rows without queueId/shardingKey go round robin in runs of batch_size, from a random queue: every
    # task starting at queue 0 would pile small writes (a few rows per task or micro-batch) onto queue 0.
    round_robin = _RANDOM.randrange(1 << 20) * options.batch_size
    try:
        for batch in batches:
            if batch.num_rows:
                round_robin = _submit_batch(sender, producer, options, batch, round_robin)
    except BaseException:
        sender.drain()  # never leave sends running behind a failed iterator; its error is the one raised
        raise
    return sender.finish()


SendRun = tuple[MessageQueue, "list[Message] | bytes", int, bool]
"""Rows for one send: queue, payload (encoded SEND_BATCH items, or ``Message`` objects), row count, ordered."""


def place_runs(
    producer: AsyncProducer,
    options: SinkOptions,
    batch: pa.RecordBatch,
    round_robin: int,
    extra: Mapping[str, str] | None = None,
) -> tuple[list[SendRun], int]:
    """Place each row on a queue and cut runs of at most ``batch_size`` rows (and ``MAX_RUN_BYTES``) per
    queue and lane, in row order; ``extra``: properties for every row. Blocks on route lookups: call it
    from a task's thread, never on the client loop."""
    topics, topic_of_row = _row_topics(batch, options)
    encoded = encode_rows(batch, _IDS, extra)
    messages = _messages(batch, [topics[i] for i in topic_of_row.tolist()], extra) if encoded is None else None
    queue_ids = batch.column("queueId") if "queueId" in batch.schema.names else None
    sharding = batch.column("shardingKey") if "shardingKey" in batch.schema.names else None
    runs: list[SendRun] = []
    for index, topic in enumerate(topics):
        rows = np.flatnonzero(topic_of_row == index) if len(topics) > 1 else np.arange(batch.num_rows)
        queues = loop_thread.run(_writable_queues(producer, topic, options.send_retry_timeout_ms / 1000))
        place, ordered = _place(rows, queues, queue_ids, sharding, round_robin, options.batch_size)
        round_robin += int(np.count_nonzero(~ordered))
        for position, queue in enumerate(queues):
            for lane in (False, True):
                chosen = rows[(place == position) & (ordered == lane)]
                for first in range(0, len(chosen), options.batch_size):
                    run = chosen[first : first + options.batch_size]
                    if encoded is not None:
                        pieces = _by_bytes(run, encoded.offsets)
                        runs += [(queue, encoded.body_of(piece), len(piece), lane) for piece in pieces]
                        continue
                    assert messages is not None
                    sizes = [len(messages[i].body_bytes) + _properties_bytes(messages[i]) for i in run.tolist()]
                    for piece in _by_bytes(np.arange(len(run)), np.cumsum([0, *sizes])):
                        runs.append((queue, [messages[i] for i in run[piece].tolist()], len(piece), lane))
    return runs, round_robin


def _properties_bytes(message: Message) -> int:
    """About the encoded size of a message's properties (the fixed ones plus its own)."""
    return (
        100
        + sum(len(k) + len(v) + 2 for k, v in message.properties.items())
        + len(message.tags or "")
        + sum(len(k) + 1 for k in message.keys or [])
    )


def _by_bytes(run: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64]) -> list[npt.NDArray[np.int64]]:
    """``run`` cut so that each piece's items stay within ``MAX_RUN_BYTES`` (a piece holds at least one row)."""
    sizes = offsets[run + 1] - offsets[run]
    if int(sizes.sum()) <= MAX_RUN_BYTES:
        return [run]
    pieces, first, total = [], 0, 0
    for i, size in enumerate(sizes.tolist()):  # rare (rows of several KiB): a plain greedy cut
        if total + size > MAX_RUN_BYTES and i > first:
            pieces.append(run[first:i])
            first, total = i, 0
        total += size
    pieces.append(run[first:])
    return pieces


def _submit_batch(
    sender: _Sender, producer: AsyncProducer, options: SinkOptions, batch: pa.RecordBatch, round_robin: int
) -> int:
    """Submit the batch's runs; ``Message`` runs with delayed rows go as two sends (plain, delayed)."""
    runs, round_robin = place_runs(producer, options, batch, round_robin)
    for queue, payload, count, lane in runs:
        if isinstance(payload, bytes):
            sender.submit(payload, count, queue, lane)
            continue
        plain = [m for m in payload if m.delay_level <= 0]
        delayed = [m for m in payload if m.delay_level > 0]
        for group in (plain, delayed):
            if group:
                sender.submit(group, len(group), queue, lane)
    return round_robin


def _place(
    rows: npt.NDArray[np.int64],
    queues: list[MessageQueue],
    queue_ids: pa.Array | None,
    sharding: pa.Array | None,
    round_robin: int,
    batch_size: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Each row's queue (a position in ``queues``) and whether it was placed by queueId/shardingKey (ordered)."""
    place = np.zeros(len(rows), dtype=np.int64)
    ordered = np.zeros(len(rows), dtype=bool)
    if sharding is not None:
        keys = sharding.take(pa.array(rows)).to_pylist()
        for i, key in enumerate(keys):
            if key is not None:
                place[i], ordered[i] = zlib.crc32(key.encode()) % len(queues), True
    if queue_ids is not None:
        wanted = queue_ids.take(pa.array(rows))
        given = ~pc.is_null(wanted).to_numpy(zero_copy_only=False)
        if given.any():
            positions = {q.queue_id: i for i, q in enumerate(queues)}
            for i in np.flatnonzero(given).tolist():
                queue_id = wanted[i].as_py()
                if queue_id not in positions:
                    raise SparkmqError(f"topic {queues[0].topic} has no queue {queue_id}")
                place[i], ordered[i] = positions[queue_id], True
    free = np.flatnonzero(~ordered)
    place[free] = ((round_robin + np.arange(len(free))) // batch_size) % len(queues)
    return place, ordered


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
            queues = (
                await producer.instance.publish_route(topic, AUTO_CREATE_TOPIC_KEY, DEFAULT_TOPIC_QUEUE_NUMS)
            ).publish_queues()
            if queues:
                return queues
            problem = f"topic {topic} has no writable queue"
        except SparkmqError as exc:
            problem = exc.remark
        if loop.time() + pause > deadline:
            raise SparkmqError(
                f"no broker serves topic {topic} after waiting {timeout_s:.0f} s (sendRetryTimeout): {problem}",
                retriable=True,
            )
        producer.instance.routes.pop(topic, None)
        await asyncio.sleep(pause)
        pause = min(pause * 2, ROUTE_WAIT_MAX_PAUSE_S)
