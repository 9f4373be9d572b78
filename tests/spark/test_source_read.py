"""Issue 5, point 1: messages sent by real clients come out of a streaming query column for column.

N messages from sparkmq's Python client (and from the real C++ RocketMQ client) are read by
``readStream.format("sparkmq")`` with Trigger.AvailableNow; the rows are compared with chispa
against what was sent: body bytes (non-UTF-8 and compressed too), tags, keys, the properties
map, queueId/queueOffset, topic, brokerName, msgId = UNIQ_KEY, plausible timestamps; and the
schema is the documented one.
"""

from __future__ import annotations

import time

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sparkmq import native
from sparkmq.client import Message
from sparkmq.connector.columns import SCHEMA_DDL
from support.rocketmq_cpp import CppClientRun
from support.spark_harness import BROKER, reader, run_available_now

# The documented wide schema (wideSchema=true), written out as the contract; the default is the lean SCHEMA_DDL.
DOCUMENTED_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("brokerName", StringType()),
        StructField("queueId", IntegerType()),
        StructField("queueOffset", LongType()),
        StructField("commitLogOffset", LongType()),
        StructField("msgId", StringType()),
        StructField("keys", StringType()),
        StructField("tags", StringType()),
        StructField("body", BinaryType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("bornTimestamp", TimestampType()),
        StructField("storeTimestamp", TimestampType()),
        StructField("bornHost", StringType()),
        StructField("storeHost", StringType()),
        StructField("reconsumeTimes", IntegerType()),
    ]
)
LEAN = [
    "topic",
    "brokerName",
    "queueId",
    "queueOffset",
    "msgId",
    "keys",
    "tags",
    "body",
    "bornTimestamp",
    "storeTimestamp",
]
COMPARED = [
    "topic",
    "brokerName",
    "queueId",
    "queueOffset",
    "msgId",
    "keys",
    "tags",
    "body",
    "properties",
    "reconsumeTimes",
]


def python_messages(topic: str, count: int) -> list[Message]:
    """Bodies that are not UTF-8, two large enough to be sent compressed; tags/keys/properties varied."""
    messages = []
    for i in range(count):
        body = bytes([0xFF, 0xFE, i % 256, 0x00, 0x80]) + f"-{i}".encode()
        if i in (7, 23):
            body = bytes((i * 31 + j * 7) % 256 for j in range(6000))  # ≥ 4 KiB: compressed on the wire
        messages.append(
            Message(
                topic,
                body,
                tags=None if i % 5 == 0 else f"tag{i % 3}",
                keys=None if i % 4 == 0 else [f"k{i}", f"order-{i % 7}"],
                properties={} if i % 6 == 0 else {"seq": str(i), "city": "Zürich", "empty-ish": " "},
            )
        )
    return messages


@pytest.mark.parametrize("local_reads", ["true", "false"], ids=["from-the-store-files", "pulled-over-sockets"])
def test_python_client_messages_read_with_available_now(spark, cluster, names, local_reads) -> None:
    """Every field of every record, read from the broker's files beside it (the default) and over sockets."""
    topic = cluster.topic(queues=4)
    count = 40
    messages = python_messages(topic, count)
    before_ms = int(time.time() * 1000) - 1
    results = cluster.send(messages)
    after_ms = int(time.time() * 1000) + 1

    lean = reader(spark, cluster, topic=topic, consumerGroup=names.group).load()
    assert (
        lean.schema
        == StructType([f for f in DOCUMENTED_SCHEMA.fields if f.name in LEAN])
        == StructType.fromDDL(SCHEMA_DDL)
    )
    with_map = reader(spark, cluster, topic=topic, consumerGroup=names.group, includeProperties="true").load()
    assert with_map.schema.names == LEAN[:8] + ["properties"] + LEAN[8:]
    df = reader(
        spark,
        cluster,
        topic=topic,
        consumerGroup=names.group,
        startingOffsets="earliest",
        wideSchema="true",
        localReads=local_reads,
    ).load()
    assert df.schema == DOCUMENTED_SCHEMA
    served = cluster.served()
    collected, query = run_available_now(df, names.checkpoint())
    # Over sockets the broker hands out every record; from its files, one per range read (the probes).
    # Reading the files takes the C gather: with SPARKMQ_NATIVE=0 every range is pulled.
    from_files = local_reads == "true" and native.queueread is not None
    assert cluster.served() - served == (len({r.queue.queue_id for r in results}) if from_files else count)

    rows = collected.rows
    assert len(rows) == count
    assert sum(p["numInputRows"] for p in query.recentProgress) == count

    expected = []
    for message, result in zip(messages, results, strict=True):
        props = dict(message.properties, UNIQ_KEY=result.msg_id, WAIT="true")
        if message.tags:
            props["TAGS"] = message.tags
        if message.keys:
            props["KEYS"] = " ".join(message.keys)
        expected.append(
            (
                topic,
                BROKER,
                result.queue.queue_id,
                result.queue_offset,
                result.msg_id,
                " ".join(message.keys) if message.keys else None,
                message.tags,
                message.body_bytes,
                props,
                0,
            )
        )
    expected.sort(key=lambda r: (r[2], r[3]))
    actual = sorted(rows, key=lambda r: (r.queueId, r.queueOffset))
    subset = StructType([DOCUMENTED_SCHEMA[name] for name in COMPARED])
    actual_df = spark.createDataFrame([tuple(r[c] for c in COMPARED) for r in actual], subset)
    expected_df = spark.createDataFrame(expected, subset)
    assert_df_equality(actual_df, expected_df)

    # Columns not known to the sender: plausible values.
    for row in rows:
        born, stored = row.bornTimestamp.timestamp() * 1000, row.storeTimestamp.timestamp() * 1000
        assert before_ms <= born <= after_ms, (row.bornTimestamp, before_ms, after_ms)
        assert born - 1 <= stored <= after_ms
        assert row.storeHost == cluster.broker.address
        assert row.bornHost.startswith("127.0.0.1:")
    per_queue: dict[int, list[int]] = {}
    for row in actual:
        per_queue.setdefault(row.queueId, []).append(row.commitLogOffset)
    assert all(offsets == sorted(offsets) for offsets in per_queue.values())
    assert len({row.commitLogOffset for row in rows}) == count


def test_cpp_client_messages_read_with_available_now(spark, cluster, names, tmp_path) -> None:
    topic = cluster.topic(queues=4, prefix="SparkCpp")
    count = 30
    run = CppClientRun.start(
        tmp_path / "cpp-home",
        "produce",
        "--namesrv",
        cluster.ns,
        "--topic",
        topic,
        "--group",
        f"PID_{names.tag}",
        "--count",
        str(count),
    )
    sent = [r for r in run.finish(timeout_s=90) if r["event"] == "sent"]
    assert len(sent) == count and all(r["status"] == 0 for r in sent)

    df = reader(
        spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets="earliest", includeProperties="true"
    ).load()
    collected, _ = run_available_now(df, names.checkpoint())
    assert len(collected.rows) == count

    schema = (
        "msgId string, queueOffset long, topic string, brokerName string, keys string, tags string, "
        "body binary, color string, seq string, uniqKey string"
    )
    actual = sorted(collected.rows, key=lambda r: r.msgId)
    actual_df = spark.createDataFrame(
        [
            (
                r.msgId,
                r.queueOffset,
                r.topic,
                r.brokerName,
                r.keys,
                r.tags,
                r.body,
                r.properties.get("color"),
                r.properties.get("seq"),
                r.properties.get("UNIQ_KEY"),
            )
            for r in actual
        ],
        schema,
    )
    expected_df = spark.createDataFrame(
        sorted(
            [
                (
                    r["msg_id"],
                    r["offset"],
                    topic,
                    BROKER,
                    f"key-{r['index']}",
                    f"Tag{r['index'] % 3}",
                    f"m-body-{r['index']}".encode(),
                    ("red", "green", "blue")[r["index"] % 3],
                    str(r["index"]),
                    r["msg_id"],
                )
                for r in sent
            ],
            key=lambda t: t[0],
        ),
        schema,
    )
    assert_df_equality(actual_df, expected_df)
    # Every queue's offsets are dense from 0.
    by_queue: dict[int, list[int]] = {}
    for r in collected.rows:
        by_queue.setdefault(r.queueId, []).append(r.queueOffset)
    assert all(sorted(offsets) == list(range(len(offsets))) for offsets in by_queue.values())


def test_projection_and_filter_on_stream_columns(spark, cluster, names) -> None:
    """The columns behave as normal Spark columns (map lookups, casts) inside a streaming plan."""
    topic = cluster.topic(queues=2)
    cluster.send(
        [
            Message(topic, f"v{i}".encode(), tags="keep" if i % 2 else "drop", properties={"n": str(i)})
            for i in range(10)
        ]
    )
    df = (
        reader(
            spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets="earliest", includeProperties="true"
        )
        .load()
        .where(F.col("tags") == "keep")
        .select(F.col("body").cast("string").alias("value"), F.col("properties")["n"].cast("int").alias("n"))
    )
    collected, _ = run_available_now(df, names.checkpoint())
    actual = spark.createDataFrame(sorted(collected.rows, key=lambda r: r.n), "value string, n int")
    expected = spark.createDataFrame([(f"v{i}", i) for i in range(1, 10, 2)], "value string, n int")
    assert_df_equality(actual, expected)


def test_cpp_batch_messages_have_one_entry_per_property_key(spark, cluster, names, tmp_path) -> None:
    """A batch from a RocketMQ client carries batch-level properties the broker appends to each item
    (``WAIT`` twice): the map column holds each key once, the last value winning, as the plain decoder."""
    topic = cluster.topic(queues=4, prefix="SparkCppBatch")
    run = CppClientRun.start(
        tmp_path / "cpp-home",
        "produce-batch",
        "--namesrv",
        cluster.ns,
        "--topic",
        topic,
        "--group",
        f"PID_{names.tag}",
        "--batches",
        "3",
        "--size",
        "4",
    )
    assert all(r["status"] == 0 for r in run.finish(timeout_s=90) if r["event"] == "sent")
    df = (
        reader(
            spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets="earliest", includeProperties="true"
        )
        .load()
        .select(
            "msgId",
            "properties",
            F.size("properties").alias("entries"),
            F.size(F.array_distinct(F.map_keys("properties"))).alias("distinct_keys"),
        )
    )
    collected, _ = run_available_now(df, names.checkpoint())
    rows = collected.rows
    assert len(rows) == 12
    assert all(r.entries == r.distinct_keys for r in rows), [(r.entries, r.distinct_keys) for r in rows]
    reference = {m.msg_id: m.properties for m in cluster.read_all(topic, 4)}
    schema = "msgId string, properties map<string,string>"
    assert_df_equality(
        spark.createDataFrame(sorted((r.msgId, r.properties) for r in rows), schema),
        spark.createDataFrame(sorted(reference.items()), schema),
    )
