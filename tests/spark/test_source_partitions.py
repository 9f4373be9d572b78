"""Issue 9, source speed: ``maxPartitions`` packs several queues' ranges into one Spark partition.

* The planner (pure): every offset of every queue lands in exactly one partition, each range whole
  and in offset order, at most ``maxPartitions`` partitions of nearly equal size, never one above
  ``maxRecordsPerPartition``; the same input plans the same partitions.
* A stream of 4 queues with ``maxPartitions=2``: each micro-batch runs 2 tasks, a task reads its
  queues' ranges one after the other, each fully and in order; stopped mid-stream and restarted from
  its checkpoint it reads every offset once, and the group's offsets on the broker reach the end.
* A batch read with ``maxPartitions=1`` reads all 4 queues in one task.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from sparkmq.client import Message, MessageQueue
from sparkmq.source import pack_ranges, plan_ranges
from support.spark_harness import Collected, reader, run_available_now, start_query, wait_until

QUEUES = 4

spans = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 80)).map(lambda t: (t[0], t[0] + t[1])), min_size=1, max_size=6
)


@settings(max_examples=300, deadline=None)
@given(spans=spans, most=st.none() | st.integers(1, 8), max_records=st.none() | st.integers(1, 40))
def test_packed_partitions_hold_every_offset_once_in_order(spans, most, max_records) -> None:
    start = {MessageQueue("T", "broker-a", i): first for i, (first, _) in enumerate(spans)}
    end = {MessageQueue("T", "broker-a", i): last for i, (_, last) in enumerate(spans)}
    ranges = plan_ranges(start, end, max_records)
    parts = pack_ranges(ranges, most, max_records)
    assert parts == pack_ranges(list(reversed(ranges)), most, max_records)  # the plan does not depend on input order

    seen = Counter((r.queue_id, o) for p in parts for r in p.ranges for o in range(r.start, r.end))
    assert seen == Counter((i, o) for i, (first, last) in enumerate(spans) for o in range(first, last))
    assert all(p.ranges for p in parts)
    for part in parts:
        keys = [(r.queue_id, r.start) for r in part.ranges]
        assert keys == sorted(keys)
        assert all(r.end > r.start for r in part.ranges)
        if max_records:
            assert sum(r.size for r in part.ranges) <= max_records
    if most is None:
        assert [p.ranges for p in parts] == [(r,) for r in ranges]
    elif max_records is None and ranges:
        assert len(parts) == min(most, len(ranges))
        sizes = [sum(r.size for r in p.ranges) for p in parts]
        assert max(sizes) - min(sizes) <= max(r.size for r in ranges)  # largest first into the lightest


class PerTask(Collected):
    """Rows with the Spark partition that produced them, per batch (collect keeps partition order)."""

    def __call__(self, df, batch_id: int) -> None:
        super().__call__(df.select("queueId", "queueOffset", "body", F.spark_partition_id().alias("task")), batch_id)


def check_tasks(collected: PerTask) -> int:
    """Each batch: at most 2 tasks; in each task, every queue's offsets contiguous and ascending, and a queue
    in one task only. Returns how many tasks read more than one queue."""
    mixed = 0
    for rows in collected.batches.values():
        by_task: dict[int, list[tuple[int, int]]] = {}
        for row in rows:
            by_task.setdefault(row.task, []).append((row.queueId, row.queueOffset))
        assert len(by_task) <= 2, by_task.keys()
        owners: dict[int, int] = {}
        for task, positions in by_task.items():
            queues = [q for q, _ in positions]
            runs = [q for i, q in enumerate(queues) if i == 0 or queues[i - 1] != q]
            assert len(runs) == len(set(runs)), f"task {task} went back to a queue: {runs}"
            for queue in runs:
                assert owners.setdefault(queue, task) == task, f"queue {queue} read by two tasks of one batch"
                offsets = [o for q, o in positions if q == queue]
                assert all(b == a + 1 for a, b in pairwise(offsets)), (queue, offsets)
            mixed += len(runs) > 1
    return mixed


def test_two_partitions_over_four_queues_read_each_offset_once_across_a_restart(spark, cluster, names) -> None:
    topic = cluster.topic(QUEUES)
    cluster.send([Message(topic, f"first-{i}".encode()) for i in range(120)])
    options = {"topic": topic, "consumerGroup": names.group, "startingOffsets": "earliest", "maxPartitions": 2}
    first = PerTask()
    query = start_query(reader(spark, cluster, maxOffsetsPerTrigger=24, **options).load(), names.checkpoint(), first)
    try:
        wait_until(lambda: len(first.batches) >= 2, 90, "two batches", query)
    finally:
        query.stop()
    assert 0 < first.count() < 120, "the first run must stop mid-stream"

    cluster.send([Message(topic, f"second-{i}".encode()) for i in range(40)])
    second, _ = run_available_now(
        reader(spark, cluster, maxOffsetsPerTrigger=60, **options).load(), names.checkpoint(), PerTask()
    )
    for batch_id in set(first.batches) & set(second.batches):  # a replayed batch reads the same rows
        assert sorted(first.batches[batch_id]) == sorted(second.batches[batch_id]), batch_id
    assert check_tasks(first) + check_tasks(second) > 0, "no task read more than one queue"

    union = {**first.batches, **second.batches}
    positions = Counter((r.queueId, r.queueOffset) for rows in union.values() for r in rows)
    assert positions == Counter((q, o) for q in range(QUEUES) for o in range(40))
    bodies = sorted(r.body.decode() for rows in union.values() for r in rows)
    assert bodies == sorted([f"first-{i}" for i in range(120)] + [f"second-{i}" for i in range(40)])
    assert cluster.committed_all(names.group, topic, QUEUES) == {q: 40 for q in range(QUEUES)}


def test_a_batch_read_packs_all_queues_into_one_partition(spark, cluster) -> None:
    topic = cluster.topic(QUEUES)
    cluster.send([Message(topic, f"m-{i}".encode()) for i in range(50)])
    df = spark.read.format("sparkmq").option("namesrvAddr", cluster.ns).option("topic", topic)
    df = df.option("maxPartitions", "1").load()
    assert df.rdd.getNumPartitions() == 1
    rows = df.select("queueId", "queueOffset").collect()
    assert Counter((r.queueId, r.queueOffset) for r in rows) == Counter(
        (q, o) for q in range(QUEUES) for o in range(cluster.max_offset(topic, q))
    )
    assert [r.queueId for r in rows] == sorted(r.queueId for r in rows)  # one queue after the other
