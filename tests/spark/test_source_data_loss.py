"""Issue 5, point 4 (failOnDataLoss): offsets deleted by retention fail the query, or are skipped.

A broker of its own with 64 KiB CommitLog segments and forced retention (``diskSpaceCleanForciblyRatio=0``
makes every clean pass, every 10 s, delete all but the newest segment). A query that has to
start below the queue's new minimum either fails with an error naming the queue, the missing
range and the cause (``failOnDataLoss=true``, the default), or skips the gone offsets, reads the
rest and goes on (``false``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from chispa import assert_df_equality

from sparkmq.client import Message
from support.processes import BrokerProcess, NamesrvProcess
from support.spark_harness import (
    RETENTION_ARGS,
    Cluster,
    Collected,
    failure_of,
    reader,
    run_available_now,
    start_query,
    wait_until,
)

SENT = 150


@pytest.fixture(scope="module")
def shrunk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str, int]]:
    """A cluster whose one-queue topic lost its first offsets to retention: (cluster, topic, new minimum)."""
    store = tmp_path_factory.mktemp("retention-store")
    with NamesrvProcess.start() as namesrv, BrokerProcess.start(store, namesrv.address, *RETENTION_ARGS) as broker:
        cluster = Cluster(namesrv, broker)
        try:
            topic = cluster.topic(queues=1, prefix="Gone")
            cluster.send([Message(topic, f"{i:05d}".encode() + b"." * 1000) for i in range(SENT)])
            wait_until(lambda: cluster.min_offset(topic, 0) > 0, 40, "retention to delete the first segments")
            minimum = cluster.min_offset(topic, 0)
            assert 0 < minimum < SENT and cluster.max_offset(topic, 0) == SENT
            yield cluster, topic, minimum
        finally:
            cluster.close()


def test_fail_on_data_loss_true_fails_naming_queue_range_and_cause(spark, shrunk, names) -> None:
    cluster, topic, minimum = shrunk
    df = reader(
        spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets=json.dumps({topic: {"0": 0}})
    ).load()
    query = start_query(df, names.checkpoint(), Collected(), available_now=True)
    message = failure_of(query)
    assert f"queue {topic}/broker-a/0 offsets [0, {minimum}) are gone" in message, message[-3000:]
    assert "deleted by retention" in message and "failOnDataLoss" in message


def test_fail_on_data_loss_false_skips_the_gone_offsets_and_goes_on(spark, shrunk, names) -> None:
    cluster, topic, _ = shrunk
    df = reader(
        spark,
        cluster,
        topic=topic,
        consumerGroup=names.group,
        failOnDataLoss="false",
        startingOffsets=json.dumps({topic: {"0": 0}}),
        maxOffsetsPerTrigger=100,
    ).load()
    collected, _ = run_available_now(df, names.checkpoint())
    minimum = cluster.min_offset(topic, 0)  # re-read: a later clean pass may have deleted more
    schema = "queueOffset long, body binary"
    actual = spark.createDataFrame(sorted((r.queueOffset, r.body) for r in collected.rows), schema)
    expected = spark.createDataFrame([(i, f"{i:05d}".encode() + b"." * 1000) for i in range(minimum, SENT)], schema)
    assert_df_equality(actual, expected)
    assert cluster.committed(names.group, topic, 0) == SENT
    # ... and goes on: new messages arrive in the next run on the same checkpoint.
    cluster.send([Message(topic, b"later-%d" % i) for i in range(5)])
    more, _ = run_available_now(df, names.checkpoint())
    assert sorted(r.body for r in more.rows) == [b"later-%d" % i for i in range(5)]
