"""Issue 5, points 3 and 4: broker-side group offsets, lag, rate limits and where a query starts.

* The group's offsets on the broker equal the end of the last finished batch, checked over the
  protocol (QUERY_CONSUMER_OFFSET, GET_CONSUME_STATS decoded with ``sparkmq.protocol``), and the lag
  (max − committed) is 0 once an AvailableNow query finishes.
* ``maxOffsetsPerTrigger`` bounds every batch's ``numInputRows``, under AvailableNow too.
* Each start option: earliest, latest, group, JSON per queue with -2/-1, startingTimestamp,
  startingOffsetsByTimestamp; topicPattern picks up a topic created while the query runs.
"""

from __future__ import annotations

import json
import time
import uuid

from chispa import assert_df_equality

from sparkmq.client import Message
from sparkmq.connector.options import SourceOptions
from sparkmq.source import SparkmqStreamReader
from support.spark_harness import (
    Collected,
    batch_progress,
    reader,
    run_available_now,
    start_query,
    wait_until,
)

QUEUES = 4


def offsets_by_queue(offsets: object, topic: str) -> dict[int, int]:
    """``{topic: {"broker:qid": n}}`` (a dict or its JSON text, as progress reports it) → {qid: n}."""
    table = json.loads(offsets) if isinstance(offsets, str) else offsets
    assert isinstance(table, dict)
    return {int(key.rsplit(":", 1)[1]): int(value) for key, value in table.get(topic, {}).items()}


def fill_queues(cluster, topic: str, per_queue: int, queues: int = QUEUES, prefix: str = "m") -> None:
    for queue_id in range(queues):
        cluster.send([Message(topic, f"{prefix}-{queue_id}-{i}".encode()) for i in range(per_queue)], queue_id=queue_id)


def assert_positions(spark, rows, expected: list[tuple[int, int]]) -> None:
    """The rows are exactly these (queueId, queueOffset) pairs, once each (chispa, sorted)."""
    schema = "queueId int, queueOffset long"
    actual = spark.createDataFrame(sorted((r.queueId, r.queueOffset) for r in rows), schema)
    assert_df_equality(actual, spark.createDataFrame(sorted(expected), schema))


def test_broker_offsets_follow_finished_batches_and_lag_reaches_zero(spark, cluster, names) -> None:
    topic = cluster.topic(QUEUES)
    fill_queues(cluster, topic, per_queue=15)
    committed_during: dict[int, dict[int, int]] = {}
    collected = Collected(
        on_batch=lambda batch_id, _rows: committed_during.__setitem__(
            batch_id, cluster.committed_all(names.group, topic, QUEUES)
        )
    )
    df = reader(
        spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets="earliest", maxOffsetsPerTrigger=10
    ).load()
    collected, query = run_available_now(df, names.checkpoint(), collected)

    assert collected.count() == 60
    progress = batch_progress(query)
    assert all(p["numInputRows"] <= 10 for p in progress), [p["numInputRows"] for p in progress]
    assert sum(p["numInputRows"] for p in progress) == 60
    assert len(progress) >= 6
    # While batch N runs, the group's broker offsets are the end of batch N-1 (= N's start; batch 0
    # starts at the resolved initial offsets, which progress reports as null).
    for p in progress:
        start = p["sources"][0]["startOffset"]
        expected = {q: 0 for q in range(QUEUES)} if start in (None, "null") else offsets_by_queue(start, topic)
        assert committed_during[p["batchId"]] == expected, p["batchId"]
    # After the query: committed = end of the last batch = the queues' max offsets; lag 0.
    last_end = offsets_by_queue(progress[-1]["sources"][0]["endOffset"], topic)
    assert last_end == {q: 15 for q in range(QUEUES)}
    assert cluster.committed_all(names.group, topic, QUEUES) == last_end
    stats = cluster.consume_stats(names.group, topic)
    assert {mq.queue_id: (o.broker_offset, o.consumer_offset) for mq, o in stats.offset_table.items()} == {
        q: (15, 15) for q in range(QUEUES)
    }
    assert sum(o.broker_offset - o.consumer_offset for o in stats.offset_table.values()) == 0


def test_latest_reads_only_what_is_sent_after_start_and_honours_the_limit(spark, cluster, names) -> None:
    topic = cluster.topic(QUEUES)
    cluster.send([Message(topic, f"before-{i}".encode()) for i in range(20)])
    collected = Collected()
    df = reader(
        spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets="latest", maxOffsetsPerTrigger=7
    ).load()
    query = start_query(df, names.checkpoint(), collected, processing_time="200 milliseconds")
    try:
        # The start is resolved (and committed to the group) on the query's first trigger.
        wait_until(
            lambda: topic in cluster.group_topics(names.group), 60, "the query to resolve its starting offsets", query
        )
        assert cluster.committed_all(names.group, topic, QUEUES) == {q: 5 for q in range(QUEUES)}
        cluster.send([Message(topic, f"after-{i}".encode()) for i in range(30)])
        wait_until(lambda: collected.count() >= 30, 60, "30 rows", query)
        time.sleep(1.0)  # a few more triggers: nothing else may arrive
    finally:
        query.stop()
    bodies = sorted(r.body.decode() for r in collected.rows)
    assert bodies == sorted(f"after-{i}" for i in range(30))
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes and max(sizes) <= 7 and sum(sizes) == 30, sizes


def test_group_starts_from_committed_offsets_and_earliest_where_none(spark, cluster, names) -> None:
    topic = cluster.topic(QUEUES)
    fill_queues(cluster, topic, per_queue=10)
    cluster.commit(names.group, topic, 0, 4)
    cluster.commit(names.group, topic, 1, 10)
    cluster.commit(names.group, topic, 2, 0)  # queue 3: no offset for the group
    df = reader(spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets="group").load()
    collected, _ = run_available_now(df, names.checkpoint())
    expected = [(0, o) for o in range(4, 10)] + [(2, o) for o in range(10)] + [(3, o) for o in range(10)]
    assert_positions(spark, collected.rows, expected)
    assert cluster.committed_all(names.group, topic, QUEUES) == {q: 10 for q in range(QUEUES)}
    # A new query (fresh checkpoint) of a group that has offsets resumes from them whatever the
    # starting option says (docs/spark.md: RocketMQ's consume-from-where semantics).
    fill_queues(cluster, topic, per_queue=2, prefix="more")
    df = reader(spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets="earliest").load()
    resumed, _ = run_available_now(df, names.checkpoint("second"))
    assert_positions(spark, resumed.rows, [(q, o) for q in range(QUEUES) for o in (10, 11)])


def test_json_starting_offsets_per_queue_with_earliest_and_latest(spark, cluster, names) -> None:
    topic = cluster.topic(QUEUES)
    fill_queues(cluster, topic, per_queue=10)
    starting = json.dumps({topic: {"0": 3, "broker-a:1": -2, "2": -1}})  # queue 3 unspecified: earliest
    df = reader(spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets=starting).load()
    collected, _ = run_available_now(df, names.checkpoint())
    expected = [(0, o) for o in range(3, 10)] + [(1, o) for o in range(10)] + [(3, o) for o in range(10)]
    assert_positions(spark, collected.rows, expected)


def _two_generations(cluster, topic: str) -> int:
    """Send 'old' messages, then 'new' ones; return a timestamp between them."""
    fill_queues(cluster, topic, per_queue=5, prefix="old")
    time.sleep(0.3)
    middle = int(time.time() * 1000)
    time.sleep(0.3)
    fill_queues(cluster, topic, per_queue=5, prefix="new")
    return middle


def test_starting_timestamp_reads_messages_stored_from_then_on(spark, cluster, names) -> None:
    topic = cluster.topic(QUEUES)
    middle = _two_generations(cluster, topic)
    df = reader(
        spark, cluster, topic=topic, consumerGroup=names.group, startingTimestamp=middle, startingOffsets="earliest"
    ).load()  # startingTimestamp takes precedence
    collected, _ = run_available_now(df, names.checkpoint())
    assert sorted(r.body.decode() for r in collected.rows) == sorted(
        f"new-{q}-{i}" for q in range(QUEUES) for i in range(5)
    )
    assert all(r.storeTimestamp.timestamp() * 1000 >= middle for r in collected.rows)


def test_starting_offsets_by_timestamp_per_queue(spark, cluster, names) -> None:
    topic = cluster.topic(QUEUES)
    middle = _two_generations(cluster, topic)
    future = int(time.time() * 1000) + 3_600_000
    by_time = json.dumps({topic: {"0": middle, "1": 0, "2": future}})  # queue 3: startingOffsets (earliest)
    df = reader(
        spark,
        cluster,
        topic=topic,
        consumerGroup=names.group,
        startingOffsetsByTimestamp=by_time,
        startingOffsets="earliest",
    ).load()
    collected, _ = run_available_now(df, names.checkpoint())
    expected = [(0, o) for o in range(5, 10)] + [(1, o) for o in range(10)] + [(3, o) for o in range(10)]
    assert_positions(spark, collected.rows, expected)


def test_topic_pattern_picks_up_a_topic_created_while_running(spark, cluster, names) -> None:
    prefix = f"Pat{uuid.uuid4().hex[:8]}"
    first = f"{prefix}_a"
    cluster.create_topic(first, 2)
    cluster.send([Message(first, f"a-{i}".encode()) for i in range(10)])
    collected = Collected()
    df = reader(
        spark,
        cluster,
        topicPattern=f"{prefix}_.*",
        consumerGroup=names.group,
        startingOffsets="earliest",
        maxOffsetsPerTrigger=6,
    ).load()
    query = start_query(df, names.checkpoint(), collected, processing_time="300 milliseconds")
    try:
        wait_until(lambda: collected.count() >= 10, 60, "the first topic's 10 rows", query)
        second, other = f"{prefix}_b", f"Other{prefix}_b"
        cluster.create_topic(second, 3)
        cluster.create_topic(other, 1)
        cluster.send([Message(second, f"b-{i}".encode()) for i in range(12)])
        cluster.send([Message(other, f"x-{i}".encode()) for i in range(3)])
        wait_until(lambda: collected.count() >= 22, 60, "the new topic's 12 rows", query)
        time.sleep(1.0)
    finally:
        query.stop()
    got = sorted((r.topic, r.body.decode()) for r in collected.rows)
    assert got == sorted([(first, f"a-{i}") for i in range(10)] + [(second, f"b-{i}") for i in range(12)])
    assert all(p["numInputRows"] <= 6 for p in query.recentProgress)


def test_a_queue_found_between_batches_counts_against_the_limit(cluster, names) -> None:
    """The planner itself (no Spark needed): a topic that appears under topicPattern with a backlog
    larger than maxOffsetsPerTrigger must not be planned in one go."""
    prefix = f"Lim{uuid.uuid4().hex[:8]}"
    cluster.create_topic(f"{prefix}_a", 1)
    cluster.send([Message(f"{prefix}_a", b"a")] * 3)
    stream = SparkmqStreamReader(
        SourceOptions.parse(
            {
                "namesrvAddr": cluster.ns,
                "topicPattern": f"{prefix}_.*",
                "consumerGroup": names.group,
                "startingOffsets": "earliest",
                "maxOffsetsPerTrigger": "6",
            },
            streaming=True,
        )
    )
    start = stream.initialOffset()
    cluster.create_topic(f"{prefix}_b", 3)
    cluster.send([Message(f"{prefix}_b", b"b")] * 12)
    end = stream.latestOffset(start, stream.getDefaultReadLimit())
    planned = sum(offset for queues in end.values() for offset in queues.values()) - sum(
        offset for queues in start.values() for offset in queues.values()
    )
    assert 0 < planned <= 6, end
    assert set(end) == {f"{prefix}_a", f"{prefix}_b"}
