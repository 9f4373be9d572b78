"""Issue 32 end to end: the broker materializes a table-enabled topic, retention then deletes its first
CommitLog segments (it holds them until the table has them), and a Spark query from ``earliest`` with
``history=table`` reads every offset exactly once: the deleted ones from the table, the rest from the broker.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sparkmq.client import Message
from sparkmq.client.admin_ext import AdminExt
from sparkmq.protocol.namesrv_bodies import TopicConfig
from support.processes import BrokerProcess, NamesrvProcess
from support.spark_harness import BROKER, RETENTION_ARGS, Cluster, wait_until

QUEUES = 2
SENT = 300


async def _create_table_topic(namesrv: str, broker: str, topic: str) -> None:
    admin = AdminExt(namesrv)
    try:
        await admin.create_topic(broker, TopicConfig(topic, QUEUES, QUEUES), "+table.enable=true")
    finally:
        await admin.close()


def test_a_query_from_earliest_reads_what_retention_deleted_from_the_materialized_table(spark, tmp_path: Path) -> None:
    tables = tmp_path / "tables"
    flags = ("--set", f"tableTopicRoot={tables}", "--set", "tableTopicCommitIntervalMs=200", *RETENTION_ARGS)
    with NamesrvProcess.start() as namesrv, BrokerProcess.start(tmp_path / "store", namesrv.address, *flags) as broker:
        cluster = Cluster(namesrv, broker)
        try:
            topic = "Materialized"
            asyncio.run(_create_table_topic(namesrv.address, broker.address, topic))
            results = cluster.send([Message(topic, f"{i:05d}".encode() + b"." * 1000) for i in range(SENT)])
            wait_until(
                lambda: all(cluster.min_offset(topic, q) > 0 for q in range(QUEUES)),
                90,
                "retention to delete the first segments once the table holds them",
            )
            rows = (
                spark.read.format("sparkmq")
                .option("namesrvAddr", namesrv.address)
                .option("topic", topic)
                .option("history", "table")
                .option("tableRoot", str(tables))
                .load()
                .collect()
            )
        finally:
            cluster.close()
    got = sorted((r.brokerName, r.queueId, r.queueOffset, bytes(r.body)) for r in rows)
    sent = sorted(
        (BROKER, r.queue.queue_id, r.queue_offset, f"{i:05d}".encode() + b"." * 1000) for i, r in enumerate(results)
    )
    assert got == sent
