"""Issue 9, sink correctness: how a task feeds its rows to the broker.

The writer is driven directly (``SparkmqBatchWriter.write`` with an iterator the test controls)
against the session's real broker, so the test sees what Spark's task thread would see:
* the iterator is consumed on the task's thread, never on the process-wide client loop;
* memory is bounded: rows pulled from the iterator but not yet stored never exceed
  ``maxInFlight × batchSize``;
* rows with a ``shardingKey`` land in their queue in row order, across many small batches.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import defaultdict
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from sparkmq.client import loop_thread
from sparkmq.connector.sink_options import SinkOptions
from sparkmq.connector.sink_send import producer_for
from sparkmq.sink import SparkmqBatchWriter
from support.spark_harness import Cluster

QUEUES = 4
BODY_ONLY = StructType([StructField("body", BinaryType())])
WITH_KEY = StructType([StructField("body", BinaryType()), StructField("shardingKey", StringType())])
WAIT_S = 60.0  # a deadlock guard only: the test is synchronised on events


def sink(cluster: Cluster, schema: StructType, **options: object) -> SparkmqBatchWriter:
    opts = {"namesrvAddr": cluster.ns, **{k: str(v) for k, v in options.items()}}
    return SparkmqBatchWriter(SinkOptions.parse(opts), schema)


def bodies(first: int, count: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([b"row-%06d" % i for i in range(first, first + count)], pa.binary())], ["body"]
    )


def test_a_blocked_iterator_leaves_the_client_loop_responsive(cluster) -> None:
    topic = cluster.topic(QUEUES)
    entered, release = threading.Event(), threading.Event()
    threads: list[str] = []

    def rows() -> Iterator[pa.RecordBatch]:
        yield bodies(0, 10)
        threads.append(threading.current_thread().name)
        entered.set()
        assert release.wait(WAIT_S), "the test never released the iterator"
        yield bodies(10, 10)

    outcome: dict[str, object] = {}
    writer = sink(cluster, BODY_ONLY, topic=topic)
    task = threading.Thread(target=lambda: outcome.update(result=writer.write(rows())))
    task.start()
    try:
        assert entered.wait(WAIT_S)
        # Spark's iterator is blocked right now; every other client of the worker still needs the loop.
        assert loop_thread.run(asyncio.sleep(0, result="alive"), timeout=WAIT_S) == "alive"
    finally:
        release.set()
        task.join(WAIT_S)
    assert threads and threads[0] != "sparkmq-client-loop"
    assert outcome["result"].sent == 20
    assert sum(cluster.max_offset(topic, q) for q in range(QUEUES)) == 20


def test_rows_pulled_but_not_stored_stay_within_max_in_flight(cluster) -> None:
    topic = cluster.topic(QUEUES)
    batch_rows, batches, batch_size, in_flight = 50, 60, 10, 2
    ahead: list[int] = []

    def rows() -> Iterator[pa.RecordBatch]:
        for k in range(batches):
            stored = sum(cluster.max_offset(topic, q) for q in range(QUEUES))
            ahead.append(k * batch_rows - stored)  # handed to the writer, not yet on the broker
            yield bodies(k * batch_rows, batch_rows)

    result = sink(cluster, BODY_ONLY, topic=topic, batchSize=batch_size, maxInFlight=in_flight).write(rows())
    assert result.sent == batch_rows * batches
    assert sum(cluster.max_offset(topic, q) for q in range(QUEUES)) == batch_rows * batches
    assert max(ahead) <= in_flight * batch_size, ahead


def test_sharding_key_keeps_row_order_per_key(cluster, monkeypatch) -> None:
    """Every third frame is held back a little (an injected slow send): frames of one queue sent
    concurrently would then land out of order; the sink's per-queue lane keeps them in row order."""
    topic = cluster.topic(QUEUES)
    keys, per_key, batch_rows = 12, 60, 300
    writer = sink(cluster, WITH_KEY, topic=topic, batchSize=2, maxInFlight=32)
    producer = producer_for(writer.options)
    real_send, calls = producer.send_encoded_batch, itertools.count()

    async def slow_every_third(*args, **kwargs):
        if next(calls) % 3 == 0:
            await asyncio.sleep(0.02)
        return await real_send(*args, **kwargs)

    monkeypatch.setattr(producer, "send_encoded_batch", slow_every_third)

    def rows() -> Iterator[pa.RecordBatch]:
        all_rows = [(f"k{i % keys}", i // keys) for i in range(keys * per_key)]
        for first in range(0, len(all_rows), batch_rows):
            chunk = all_rows[first : first + batch_rows]
            yield pa.RecordBatch.from_arrays(
                [pa.array([f"{k}:{seq}".encode() for k, seq in chunk], pa.binary()), pa.array([k for k, _ in chunk])],
                ["body", "shardingKey"],
            )

    result = writer.write(rows())
    assert result.sent == keys * per_key
    seen: dict[str, list[int]] = defaultdict(list)
    queue_of: dict[str, set[int]] = defaultdict(set)
    for message in sorted(cluster.read_all(topic, QUEUES), key=lambda m: (m.queue.queue_id, m.queue_offset)):
        key, seq = message.body.decode().split(":")
        seen[key].append(int(seq))
        queue_of[key].add(message.queue.queue_id)
    assert all(len(q) == 1 for q in queue_of.values()), queue_of
    assert {k: s for k, s in seen.items() if s != list(range(per_key))} == {}
