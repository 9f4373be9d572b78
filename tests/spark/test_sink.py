"""Issue 5, point 5: the sink. N rows become N messages with the keys, tags, properties and queue
the row asked for; streaming writes too; a broker restarted mid-write loses nothing (at-least-once).

What landed on the broker is read back with sparkmq's PullConsumer (never with the Spark source).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType

from sparkmq import sink
from sparkmq.client import Message, ReceivedMessage, loop_thread
from sparkmq.connector import sink_send
from sparkmq.connector.sink_options import SinkOptions
from sparkmq.errors import DurabilityNotConfirmedError, SparkmqError
from sparkmq.protocol import ResponseCode
from support.processes import BrokerProcess, NamesrvProcess
from support.spark_harness import Cluster, reader
from support.unconfirming_broker import UnconfirmingCluster

QUEUES = 4
SYSTEM_PROPERTIES = {"UNIQ_KEY", "WAIT", "TAGS", "KEYS", "DELAY"}
ROW_SCHEMA = "body binary, keys string, tags string, properties map<string,string>"


def writer(df, cluster: Cluster, **options: object):
    out = df.write.format("sparkmq").mode("append").option("namesrvAddr", cluster.ns)
    for key, value in options.items():
        out = out.option(key, str(value))
    return out


def user_properties(message: ReceivedMessage) -> dict[str, str]:
    return {k: v for k, v in message.properties.items() if k not in SYSTEM_PROPERTIES}


def test_batch_write_n_rows_become_n_messages(spark, cluster) -> None:
    topic = cluster.topic(QUEUES)
    count = 50
    rows = [
        (
            bytes([0xC3, 0x28, i % 256]) + f"#{i}".encode(),
            f"k{i} shared" if i % 3 else None,
            f"tag{i % 4}" if i % 5 else None,
            {"seq": str(i), "lang": "日本語"} if i % 2 else {},
        )
        for i in range(count)
    ]
    df = spark.createDataFrame(rows, ROW_SCHEMA).repartition(3)
    # batchSize 5: each task's ~17 rows make several runs, and runs go round-robin over the queues
    # (a task's first queue is random, so with one run per task all three could meet on one queue).
    writer(df, cluster, topic=topic, batchSize=5).save()

    messages = cluster.read_all(topic, QUEUES)
    assert len(messages) == count
    actual = spark.createDataFrame(
        sorted([(m.body, " ".join(m.keys) or None, m.tags, user_properties(m)) for m in messages]), ROW_SCHEMA
    )
    assert_df_equality(actual, spark.createDataFrame(sorted(rows), ROW_SCHEMA))
    assert len({m.msg_id for m in messages}) == count
    assert all(m.msg_id == m.properties["UNIQ_KEY"] for m in messages)
    # No queueId/shardingKey: the rows are spread over the topic's queues.
    assert len({m.queue.queue_id for m in messages}) > 1


def test_queue_id_column_and_sharding_key_choose_the_queue(spark, cluster) -> None:
    by_id, by_key = cluster.topic(QUEUES), cluster.topic(QUEUES)
    df = spark.createDataFrame(
        [(f"q{i}".encode(), i % QUEUES, f"user-{i % 5}") for i in range(40)],
        "body binary, queueId int, shardingKey string",
    ).repartition(4)
    writer(df.drop("shardingKey"), cluster, topic=by_id).save()
    writer(df.drop("queueId"), cluster, topic=by_key).save()

    placed = cluster.read_all(by_id, QUEUES)
    assert sorted((m.body, m.queue.queue_id) for m in placed) == sorted(
        (f"q{i}".encode(), i % QUEUES) for i in range(40)
    )
    sharded = cluster.read_all(by_key, QUEUES)
    assert len(sharded) == 40
    queues_of_key: dict[str, set[int]] = defaultdict(set)
    for m in sharded:
        queues_of_key[f"user-{int(m.body[1:]) % 5}"].add(m.queue.queue_id)
    assert all(len(queues) == 1 for queues in queues_of_key.values()), queues_of_key
    # Row order per key within a task: test_sink_flow.py.


def test_topic_option_wins_over_the_topic_column(spark, cluster) -> None:
    chosen, named, other = cluster.topic(QUEUES), cluster.topic(QUEUES), cluster.topic(QUEUES)
    df = spark.createDataFrame([(f"t{i}", named if i % 2 else other) for i in range(20)], "body string, topic string")
    writer(df, cluster, topic=chosen).save()
    assert sorted(m.body for m in cluster.read_all(chosen, QUEUES)) == sorted(f"t{i}".encode() for i in range(20))
    assert cluster.read_all(named, QUEUES) == [] and cluster.read_all(other, QUEUES) == []
    # Without the option, each row goes to its own topic column's topic.
    writer(df, cluster).save()
    assert sorted(m.body for m in cluster.read_all(named, QUEUES)) == sorted(f"t{i}".encode() for i in range(1, 20, 2))
    assert sorted(m.body for m in cluster.read_all(other, QUEUES)) == sorted(f"t{i}".encode() for i in range(0, 20, 2))


def test_sink_rejects_input_without_body_or_topic(spark, cluster) -> None:
    topic = cluster.topic(1)
    with pytest.raises(Exception, match="body"):
        writer(spark.createDataFrame([("x",)], "value string"), cluster, topic=topic).save()
    with pytest.raises(Exception, match="topic"):
        writer(spark.createDataFrame([("x",)], "body string"), cluster).save()


def test_streaming_write_from_one_topic_to_another(spark, cluster, names) -> None:
    source, target = cluster.topic(QUEUES), cluster.topic(2)
    cluster.send(
        [
            Message(source, f"s{i}".encode(), tags=f"t{i % 2}", keys=f"key{i}", properties={"n": str(i)})
            for i in range(30)
        ]
    )
    stream = (
        reader(
            spark,
            cluster,
            topic=source,
            consumerGroup=names.group,
            startingOffsets="earliest",
            maxOffsetsPerTrigger=12,
            includeProperties="true",
        )
        .load()
        .select("body", "keys", "tags", F.create_map(F.lit("n"), F.col("properties")["n"]).alias("properties"))
    )
    query = (
        stream.writeStream.format("sparkmq")
        .option("namesrvAddr", cluster.ns)
        .option("topic", target)
        .option("checkpointLocation", names.checkpoint())
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    assert sum(p["numInputRows"] for p in query.recentProgress) == 30
    messages = cluster.read_all(target, 2)
    actual = spark.createDataFrame(
        sorted((m.body, m.keys[0], m.tags, user_properties(m)) for m in messages), ROW_SCHEMA
    )
    expected = spark.createDataFrame(
        sorted((f"s{i}".encode(), f"key{i}", f"t{i % 2}", {"n": str(i)}) for i in range(30)), ROW_SCHEMA
    )
    assert_df_equality(actual, expected)


@pytest.fixture
def own_cluster(tmp_path) -> Iterator[Cluster]:
    """A NameServer + broker for one test that restarts the broker."""
    with NamesrvProcess.start() as namesrv:
        broker = BrokerProcess.start(tmp_path / "store", namesrv.address)
        made = Cluster(namesrv, broker)
        try:
            yield made
        finally:
            made.close()
            made.broker.stop()


def test_broker_restart_mid_write_retries_tasks_and_loses_nothing(spark, own_cluster, tmp_path) -> None:
    cluster = own_cluster
    topic = cluster.topic(QUEUES)
    count, partitions = 12_000, 6
    df = spark.range(count, numPartitions=partitions).select(F.format_string("row-%06d", "id").alias("body"))
    outcome: dict[str, object] = {}

    def write() -> None:
        # Spark resolves Python data sources through the JVM thread's *active* session, which a new
        # Python thread does not have (DATA_SOURCE_NOT_FOUND otherwise).
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        spark.sparkContext.setJobGroup("sink-restart", "a write across a broker restart")
        try:
            writer(df, cluster, topic=topic, batchSize=8, maxInFlight=1).save()
            outcome["ok"] = True
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = exc

    def stored() -> int:
        return sum(cluster.max_offset(topic, q) for q in range(QUEUES))

    thread = threading.Thread(target=write)
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while stored() < count // 10:
            assert thread.is_alive(), str(outcome.get("error"))[-4000:]
            assert time.monotonic() < deadline, "the write did not get going"
            time.sleep(0.05)
        port = cluster.broker.port
        down_at = time.monotonic()
        cluster.broker.stop()
        cluster.broker = BrokerProcess.start(tmp_path / "store", cluster.ns, port=port)  # same store, same port
        print(f"broker down for {time.monotonic() - down_at:.1f} s")
    finally:
        thread.join(180)
    assert not thread.is_alive(), "the write did not finish"
    assert outcome.get("ok"), outcome.get("error")
    assert stored() <= 4 * count, "more duplicates than 4 attempts per task can explain"

    seen = Counter(m.body for m in cluster.read_all(topic, QUEUES))
    missing = [i for i in range(count) if seen[f"row-{i:06d}".encode()] == 0]
    assert not missing, f"{len(missing)} rows lost, e.g. {missing[:5]}"
    tracker = spark.sparkContext.statusTracker()
    failed = sum(
        info.numFailedTasks
        for job in tracker.getJobIdsForGroup("sink-restart")
        for stage in (tracker.getJobInfo(job).stageIds if tracker.getJobInfo(job) else [])
        if (info := tracker.getStageInfo(stage)) is not None
    )
    # Whether a task attempt failed depends on where the restart lands: a task's own send retries and
    # its wait for the route (sendRetryTimeout) often ride the outage out. Either way nothing is lost.
    print(f"rows stored {sum(seen.values())} for {count} written; failed task attempts: {failed}")


# --- issue 15: an unconfirmed send is a failure, never a written row ------------------------------


@pytest.fixture
def unconfirming(tmp_path) -> Iterator[UnconfirmingCluster]:
    """A real broker whose sends can answer FLUSH_DISK_TIMEOUT & co. (support.unconfirming_broker)."""
    with UnconfirmingCluster.start(tmp_path / "store") as running:
        try:
            yield running
        finally:
            with sink_send._producers_lock:  # the in-process writer's cached producer: close, do not leak it
                cached = sink_send._producers
                producers = [cached.pop(key) for key in list(cached) if key[0] == running.ns]
            for producer in producers:
                loop_thread.run(producer.close())


def test_unconfirmed_answers_are_retried_then_fail_the_task(unconfirming: UnconfirmingCluster) -> None:
    topic = unconfirming.topic("SinkUnconfirmed", queues=1)
    options = SinkOptions.parse({"namesrvAddr": unconfirming.ns, "topic": topic, "batchSize": "4"})
    schema = StructType([StructField("body", BinaryType())])
    rows = pa.record_batch([pa.array([f"r{i}".encode() for i in range(4)], pa.binary())], names=["body"])
    writer_ = sink.SparkmqBatchWriter(options, schema)

    unconfirming.answers.extend([ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT])
    written = writer_.write(iter([rows]))  # the task's own retries reach a confirmed attempt
    assert (written.sent, written.queues) == (4, {f"{topic}/broker-a/0": (8, 11)})

    unconfirming.always.append(ResponseCode.SLAVE_NOT_AVAILABLE)
    with pytest.raises(SparkmqError) as raised:
        writer_.write(iter([rows]))
    assert isinstance(raised.value.__cause__, DurabilityNotConfirmedError)
    assert raised.value.__cause__.status == "SLAVE_NOT_AVAILABLE"


def test_a_write_whose_sends_are_never_confirmed_fails(spark, unconfirming: UnconfirmingCluster) -> None:
    topic = unconfirming.topic("SinkNeverConfirmed", queues=1)
    unconfirming.always.append(ResponseCode.FLUSH_DISK_TIMEOUT)
    df = spark.createDataFrame([(b"never",)], "body binary")
    with pytest.raises(Exception, match="FLUSH_DISK_TIMEOUT"):
        df.write.format("sparkmq").mode("append").option("namesrvAddr", unconfirming.ns).option("topic", topic).save()
