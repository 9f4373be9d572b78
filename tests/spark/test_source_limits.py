"""Issue 9, source correctness: offsets that go backwards, composite rate limits, topicPattern.

* A queue whose max offset moved below the query's position (here: the topic deleted and
  re-created on the broker) is data loss: with ``failOnDataLoss=true`` the query fails naming
  the queue and both offsets; with ``false`` it logs, resumes from the new end and reads what
  comes after. Never a silent skip.
* ``maxOffsetsPerTrigger`` with ``maxBytesPerTrigger``: the smaller limit wins (the planner itself).
* The split of a limit over queues (pure): exactly the limit when the backlog is larger, never past a
  queue's end, every queue with a backlog served while the limit allows one offset each.
* ``topicPattern`` matches a user topic whatever its name (no hard-coded prefix hides it).
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.client import Message, MessageQueue
from sparkmq.connector.offsets import rate_limit
from sparkmq.connector.options import OptionError, SourceOptions
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import DeleteTopicRequestHeader
from sparkmq.source import SparkmqStreamReader
from support.spark_harness import Collected, ask, failure_of, reader, run_available_now, start_query

BODY = b"." * 1000


def planner(cluster, names, **options: object) -> SparkmqStreamReader:
    opts = {
        "namesrvAddr": cluster.ns,
        "consumerGroup": names.group,
        "startingOffsets": "earliest",
        **{k: str(v) for k, v in options.items()},
    }
    return SparkmqStreamReader(SourceOptions.parse(opts, streaming=True))


def planned(start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]) -> int:
    return sum(end[t][q] - start.get(t, {}).get(q, 0) for t in end for q in end[t])


def delete_and_recreate(cluster, topic: str) -> None:
    code, remark, _, _ = ask(
        cluster.broker.address, RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader(topic).to_fields()
    )
    assert code == ResponseCode.SUCCESS, remark
    cluster.create_topic(topic, 1)


@pytest.mark.parametrize(
    ("rows", "size", "most"),
    [
        pytest.param(50, 10_000, 10, id="bytes smaller"),
        pytest.param(5, 1_000_000, 5, id="rows smaller"),
    ],
)
def test_max_offsets_and_max_bytes_the_smaller_limit_wins(cluster, names, rows: int, size: int, most: int) -> None:
    topic = cluster.topic(queues=1)
    cluster.send([Message(topic, BODY) for _ in range(100)])
    stream = planner(cluster, names, topic=topic, maxOffsetsPerTrigger=rows, maxBytesPerTrigger=size)
    start = stream.initialOffset()
    end = stream.latestOffset(start, stream.getDefaultReadLimit())
    assert 0 < planned(start, end) <= most, end


@settings(max_examples=300, deadline=None)
@given(
    spans=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 400)), min_size=1, max_size=6),
    limit=st.integers(1, 300),
)
def test_a_limit_is_split_exactly_over_the_queues_backlogs(spans, limit: int) -> None:
    start = {MessageQueue("T", "broker-a", i): first for i, (first, _) in enumerate(spans)}
    latest = {MessageQueue("T", "broker-a", i): first + more for i, (first, more) in enumerate(spans)}
    end = rate_limit(start, latest, limit)
    backlog = sum(more for _, more in spans)
    assert sum(end[q] - start[q] for q in start) == min(limit, backlog)
    assert all(start[q] <= end[q] <= latest[q] for q in start)
    waiting = [q for q in start if latest[q] > start[q]]
    if len(waiting) <= limit:
        assert all(end[q] > start[q] for q in waiting)


def test_topic_pattern_matches_user_topics_with_any_name(cluster, names) -> None:
    topic = f"BenchmarkTest{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 2)
    stream = planner(cluster, names, topicPattern=f"{topic}|TBW102|SCHEDULE_TOPIC_XXXX")
    assert set(stream.initialOffset()) == {topic}


def test_offsets_going_backwards_fail_the_query_naming_queue_and_offsets(spark, cluster, names) -> None:
    topic = cluster.topic(queues=1)
    cluster.send([Message(topic, b"old-%d" % i) for i in range(30)])
    df = reader(spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets="earliest").load()
    first, _ = run_available_now(df, names.checkpoint())
    assert first.count() == 30
    delete_and_recreate(cluster, topic)
    cluster.send([Message(topic, b"new-%d" % i) for i in range(5)])
    query = start_query(df, names.checkpoint(), Collected(), available_now=True)
    message = failure_of(query)
    assert f"queue {topic}/broker-a/0 max offset went back from 30 to 5" in message, message[-3000:]
    assert "failOnDataLoss=false" in message


def test_offsets_going_backwards_without_fail_on_data_loss_resume_from_the_new_end(spark, cluster, names) -> None:
    topic = cluster.topic(queues=1)
    cluster.send([Message(topic, b"old-%d" % i) for i in range(30)])
    df = reader(
        spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets="earliest", failOnDataLoss="false"
    ).load()
    assert run_available_now(df, names.checkpoint())[0].count() == 30
    delete_and_recreate(cluster, topic)
    cluster.send([Message(topic, b"lost-%d" % i) for i in range(5)])
    assert run_available_now(df, names.checkpoint())[0].count() == 0  # the query goes on, from the new end
    assert cluster.committed(names.group, topic, 0) == 5
    cluster.send([Message(topic, b"after-%d" % i) for i in range(3)])
    after, _ = run_available_now(df, names.checkpoint())
    assert sorted((r.queueOffset, r.body) for r in after.rows) == [(5 + i, b"after-%d" % i) for i in range(3)]
    assert cluster.committed(names.group, topic, 0) == 8


def test_the_planner_logs_the_loss_and_plans_nothing_below_the_new_end(cluster, names, caplog) -> None:
    topic = cluster.topic(queues=1)
    cluster.send([Message(topic, b"old")] * 10)
    stream = planner(cluster, names, topic=topic, failOnDataLoss="false")
    start = stream.initialOffset()
    end = stream.latestOffset(start, stream.getDefaultReadLimit())
    delete_and_recreate(cluster, topic)
    cluster.send([Message(topic, b"new")] * 2)
    with caplog.at_level("WARNING", logger="sparkmq.source"):
        again = stream.latestOffset(end, stream.getDefaultReadLimit())
    assert again == {topic: {"broker-a:0": 2}}
    assert stream.partitions(end, again) == []
    assert f"queue {topic}/broker-a/0 max offset went back from 10 to 2" in caplog.text


def test_filter_pushdown_is_refused_for_streams() -> None:
    with pytest.raises(OptionError, match="filterPushdown.*subExpression or sqlFilter"):
        SourceOptions.parse(
            {"namesrvAddr": "127.0.0.1:9876", "topic": "T", "consumerGroup": "G", "filterPushdown": "true"},
            streaming=True,
        )
