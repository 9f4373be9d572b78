"""Issue 5, point 6: batch reads (``spark.read.format("sparkmq")``) bounded by offsets or time, and a
batch write read back by a batch read; issue 9: tag filters pushed to the broker.
"""

from __future__ import annotations

import json
import time

from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, In

from sparkmq.client import Message
from sparkmq.message import encode_batch_items
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.source import SparkmqDataSource
from tests.support.spark_harness import ask

QUEUES = 4
POSITIONS = "queueId int, queueOffset long"


def batch_reader(spark, cluster, **options: object):
    read = spark.read.format("sparkmq").option("namesrvAddr", cluster.ns)
    for key, value in options.items():
        read = read.option(key, str(value))
    return read.load()


def fill(cluster, topic: str, per_queue: int, prefix: str) -> None:
    for queue_id in range(QUEUES):
        cluster.send([Message(topic, f"{prefix}-{queue_id}-{i}".encode()) for i in range(per_queue)], queue_id=queue_id)


def test_batch_read_between_json_starting_and_ending_offsets(spark, cluster) -> None:
    topic = cluster.topic(QUEUES)
    fill(cluster, topic, 10, "m")
    starting = json.dumps({topic: {"0": 2, "1": -2}})  # queues 2, 3: earliest (the batch default)
    ending = json.dumps({topic: {"0": 5, "broker-a:1": -1, "2": 3}})  # queue 3: latest
    df = batch_reader(spark, cluster, topic=topic, startingOffsets=starting, endingOffsets=ending)
    actual = df.select("queueId", "queueOffset").orderBy("queueId", "queueOffset")
    expected = (
        [(0, o) for o in range(2, 5)]
        + [(1, o) for o in range(10)]
        + [(2, o) for o in range(3)]
        + [(3, o) for o in range(10)]
    )
    assert_df_equality(actual, spark.createDataFrame(expected, POSITIONS))
    # The body of each row is the message stored at that offset.
    bodies = {(r.queueId, r.queueOffset): r.body for r in df.collect()}
    assert all(body == f"m-{q}-{o}".encode() for (q, o), body in bodies.items())


def test_batch_read_up_to_an_ending_timestamp(spark, cluster) -> None:
    topic = cluster.topic(QUEUES)
    fill(cluster, topic, 4, "old")
    time.sleep(0.3)
    middle = int(time.time() * 1000)
    time.sleep(0.3)
    fill(cluster, topic, 3, "new")
    df = batch_reader(spark, cluster, topic=topic, endingTimestamp=middle)
    actual = df.select(F.col("body").cast("string").alias("body")).orderBy("body")
    expected = spark.createDataFrame(sorted((f"old-{q}-{i}",) for q in range(QUEUES) for i in range(4)), "body string")
    assert_df_equality(actual, expected)
    # From that timestamp on, to the end: the rest.
    rest = batch_reader(spark, cluster, topic=topic, startingTimestamp=middle)
    assert sorted(r.body.decode() for r in rest.collect()) == sorted(
        f"new-{q}-{i}" for q in range(QUEUES) for i in range(3)
    )


def test_batch_write_then_batch_read_round_trip(spark, cluster) -> None:
    topic = cluster.topic(QUEUES)
    rows = [(f"body-{i}".encode(), f"key{i}", f"tag{i % 3}", {"i": str(i)}) for i in range(60)]
    schema = "body binary, keys string, tags string, properties map<string,string>"
    (
        spark.createDataFrame(rows, schema)
        .repartition(2)
        .write.format("sparkmq")
        .mode("append")
        .option("namesrvAddr", cluster.ns)
        .option("topic", topic)
        .save()
    )
    back = batch_reader(spark, cluster, topic=topic, maxRecordsPerPartition=7, includeProperties="true")
    assert back.rdd.getNumPartitions() >= 60 // 7
    actual = back.select("body", "keys", "tags", F.map_filter("properties", lambda k, _v: k == "i").alias("properties"))
    assert_df_equality(actual, spark.createDataFrame(rows, schema), transforms=[lambda df: df.orderBy("keys")])


def test_batch_read_of_assigned_queues_only(spark, cluster) -> None:
    topic = cluster.topic(QUEUES)
    fill(cluster, topic, 3, "a")
    df = batch_reader(spark, cluster, assign=json.dumps({topic: [1, 3]}))
    actual = df.select("queueId", "queueOffset").orderBy("queueId", "queueOffset")
    assert_df_equality(actual, spark.createDataFrame([(q, o) for q in (1, 3) for o in range(3)], POSITIONS))


def test_batch_read_with_a_sql_filter_keeps_only_matching_rows(spark, cluster) -> None:
    topic = cluster.topic(QUEUES)
    for queue_id in range(QUEUES):
        cluster.send(
            [
                Message(topic, f"q{queue_id}-{i}".encode(), properties={"n": str(i), "kind": ("a", "b")[i % 2]})
                for i in range(20)
            ],
            queue_id=queue_id,
        )
    df = batch_reader(spark, cluster, topic=topic, sqlFilter="n BETWEEN 5 AND 12 AND kind = 'b'")
    got = sorted(r.body.decode() for r in df.collect())
    assert got == sorted(f"q{q}-{i}" for q in range(QUEUES) for i in range(5, 13) if i % 2)


def test_tag_filters_are_pushed_to_the_broker(spark, cluster) -> None:
    """``where tags = 'x'`` / ``tags IN (...)`` become the broker's tag selector: the reader's own
    output (before Spark filters anything) holds only matching rows; through Spark the result is exact."""
    topic = cluster.topic(2)
    cluster.send([Message(topic, f"m{i}".encode(), tags=("red", "green", "blue")[i % 3]) for i in range(30)])
    planner = SparkmqDataSource({"namesrvAddr": cluster.ns, "topic": topic, "filterPushdown": "true"}).reader(None)
    filters = [EqualTo(("body",), b"x"), In(("tags",), ("red", "blue"))]
    assert list(planner.pushFilters(filters)) == filters  # Spark re-checks: the broker compares tag hashes
    pulled = [row for part in planner.partitions() for batch in planner.read(part) for row in batch.to_pylist()]
    assert sorted(r["tags"] for r in pulled) == ["blue"] * 10 + ["red"] * 10

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = batch_reader(spark, cluster, topic=topic, filterPushdown="true").where(F.col("tags").isin("green", "blue"))
        got = sorted(r.body.decode() for r in df.where(F.col("tags") != "blue").collect())
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    assert got == sorted(f"m{i}" for i in range(1, 30, 3))


def test_property_bytes_that_are_not_utf8_read_as_replacement_characters(spark, cluster) -> None:
    """A sender can store any property bytes (here a raw SEND_BATCH_MESSAGE to the real broker): the
    source's string columns stay UTF-8, bad bytes read as U+FFFD (as Java's decoder reads them), good
    non-ASCII text unchanged, in the lean and the wide schema."""
    topic = cluster.topic(1)
    properties = [b"KEYS\x01k\xff\x02X\xfe\x01v\x02TAGS\x01t\xc0\x80", "KEYS\x01ключ\x02TAGS\x01标签".encode()]
    fields = {"a": "PID_utf8", "b": topic, "c": "TBW102", "d": "1", "e": "0", "f": "0", "h": "0", "m": "true"}
    fields |= {"g": str(int(time.time() * 1000)), "i": ""}
    items = encode_batch_items([b"bad", b"good"], properties)
    code, remark, _, _ = ask(cluster.broker.address, RequestCode.SEND_BATCH_MESSAGE, fields, items)
    assert code == ResponseCode.SUCCESS, remark
    for options in ({}, {"includeProperties": "true"}, {"localReads": "false"}):
        rows = batch_reader(spark, cluster, topic=topic, **options).orderBy("queueOffset").collect()
        assert [(r.keys, r.tags) for r in rows] == [("k\ufffd", "t\ufffd\ufffd"), ("ключ", "标签")], options
    wide = batch_reader(spark, cluster, topic=topic, includeProperties="true").orderBy("queueOffset").collect()
    assert dict(wide[0].properties) == {"KEYS": "k\ufffd", "X\ufffd": "v", "TAGS": "t\ufffd\ufffd"}
