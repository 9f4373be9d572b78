"""A streaming query of the sparkmq source through a controller failover, as real processes.

Three brokers of one group in controller mode (SYNC_MASTER, ``allAckInSyncStateSet=true``); the
master is SIGKILLed while the query runs. The query carries on from the newly elected master and
sees every acknowledged message exactly once (the replicas' queues hold the same offsets).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from sparkmq import Message, Producer
from support.controller_group import UNTIL_S, ControllerGroup, send_until_ok
from support.processes import wait_until as wait_for
from support.spark_harness import Collected, Names, start_query, wait_until


def test_a_streaming_query_reads_every_acknowledged_message_once_across_a_master_kill(
    spark, names: Names, tmp_path: Path
) -> None:
    topic, acknowledged = f"CtlSpark_{names.tag}", []
    with ControllerGroup(tmp_path / "group", 3) as group:
        assert wait_for(group.all_in_sync, UNTIL_S), "the group never had a master with every replica in sync"
        assert group.namesrv is not None
        namesrv = group.namesrv.address
        with Producer("PID_CTL_SPARK", namesrv, send_timeout_s=5.0) as producer:
            for i in range(50):
                producer.send(Message(topic, b"before %d" % i))
                acknowledged.append(b"before %d" % i)
            df = (
                spark.readStream.format("sparkmq")
                .option("namesrvAddr", namesrv)
                .option("topic", topic)
                .option("consumerGroup", names.group)
                .option("startingOffsets", "earliest")
                .option("localReads", "false")
                .load()
            )
            collected = Collected()
            query = start_query(df, names.checkpoint(), collected, processing_time="500 milliseconds")
            try:
                wait_until(lambda: collected.count() >= 50, UNTIL_S, "the first messages", query)
                old = group.master_index()
                assert old is not None
                group.kill(old)
                assert wait_for(lambda: group.master_index() not in (None, old), UNTIL_S), "no master was elected"
                send_until_ok(producer, topic, b"after 0")
                acknowledged.append(b"after 0")
                for i in range(1, 50):
                    producer.send(Message(topic, b"after %d" % i))
                    acknowledged.append(b"after %d" % i)

                def bodies() -> Counter[bytes]:
                    return Counter(bytes(row.body) for row in collected.rows)

                wait_until(lambda: set(acknowledged) <= set(bodies()), UNTIL_S, "every acknowledged message", query)
            finally:
                query.stop()
    seen = bodies()
    assert {body: seen[body] for body in acknowledged} == dict.fromkeys(acknowledged, 1)
